"""Dynamic addressing in kernels: ``.ap(scalar_offset=... / vector_offset=..., indirect_dim=...)``,
``select`` with a runtime index and ``vector_select`` (S17 nki-aps, S16 ``dma_copy``), written the
way nki-library uses them (KV-cache scatter, cross-entropy target-logit gather, top-k row gather)."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, OutOfBoundsError, UnsupportedError


@nki.jit
def gather_rows(data, indices):
    """AWS's dma_copy docstring example: partition p reads row indices[p]."""
    P, F = indices.shape[0], data.shape[1]
    output = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    rows = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=data.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=output, src=rows)
    return output


@nki.jit
def update_kv_cache(cache, new_rows, positions):
    """attention_block_tkg's flat KV-cache update: batch b writes its S new rows at positions[b]
    (scalar_offset on indirect_dim=1 of cache [B, S_max, d])."""
    B, S, d = new_rows.shape
    pos = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    for b in range(B):
        nisa.dma_copy(pos, positions[b : b + 1, :])
        nisa.dma_copy(
            dst=cache.ap(pattern=[[d, S], [1, d]], offset=b * cache.shape[1] * d, scalar_offset=pos,
                         indirect_dim=1),
            src=new_rows[b],
        )
    return cache


@nki.jit
def target_logits(logits, targets):
    """cross_entropy's loss gather: row r's logit at column targets[r] (indirect_dim=1, stride 1)."""
    N, V = logits.shape
    t_sb = nl.ndarray((N, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(t_sb, targets)
    picked = nl.ndarray((N, 1), dtype=logits.dtype, buffer=nl.sbuf)
    for r in range(N):
        nisa.dma_copy(
            dst=picked[r : r + 1, :],
            src=logits.ap(pattern=[[V, 1], [1, 1]], offset=r * V,
                          scalar_offset=t_sb.ap(pattern=[[1, 1], [1, 1]], offset=r), indirect_dim=1),
        )
    out = nl.ndarray((N, 1), dtype=logits.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, picked)
    return out


@nki.jit
def select_views(a, offsets):
    """``select`` with an SBUF index (one batch) and ``vector_select`` (S17's gather_rows)."""
    batch = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(batch, value=2)
    one = nl.ndarray(a.shape[1:], a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=one[...], src=a.select(0, batch))
    offs = nl.ndarray((offsets.shape[0], 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(offs, offsets)
    flat = a.reshape((a.shape[0] * a.shape[1], a.shape[2]))
    rows = nl.ndarray((offsets.shape[0], a.shape[2]), a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=rows[...], src=flat.vector_select(0, offs))
    return one, rows


def test_vector_offset_gather_matches_numpy_indexing():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((300, 96)).astype(np.float32)
    idx = rng.integers(0, 300, (128, 1)).astype(np.uint32)
    out, prof = nki.simulate(gather_rows, profile=True)(data, idx)
    np.testing.assert_array_equal(out, data[idx[:, 0]])
    assert "DMA_COPY_INDIRECT" in {e.opcode for e in prof.timeline}


def test_scalar_offset_scatter_updates_the_cache_in_place():
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((2, 32, 16)).astype(np.float32)
    new = rng.standard_normal((2, 4, 16)).astype(np.float32)
    positions = np.array([[5], [28]], np.uint32)
    expect = cache.copy()
    expect[0, 5:9], expect[1, 28:32] = new[0], new[1]
    out = nki.simulate(update_kv_cache)(cache, new, positions)
    np.testing.assert_array_equal(cache, expect)
    np.testing.assert_array_equal(out, expect)


def test_scalar_offset_on_the_last_dim_picks_one_column():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((8, 50)).astype(np.float32)
    targets = rng.integers(0, 50, (8, 1)).astype(np.int32)
    out = nki.simulate(target_logits)(logits, targets)
    np.testing.assert_array_equal(out[:, 0], logits[np.arange(8), targets[:, 0]])


def test_runtime_select_and_vector_select():
    a = np.arange(4 * 16 * 8, dtype=np.float32).reshape(4, 16, 8)
    offsets = np.array([[0], [17], [63], [5]], np.int32)
    one, rows = nki.simulate(select_views)(a, offsets)
    np.testing.assert_array_equal(one, a[2])
    np.testing.assert_array_equal(rows, a.reshape(64, 8)[offsets[:, 0]])


def test_an_out_of_bounds_index_names_the_kernel_line():
    data = np.zeros((10, 8), np.float32)
    idx = np.full((128, 1), 3, np.uint32)
    idx[9] = 10
    with pytest.raises(OutOfBoundsError, match=r"test_indirect.py:\d+: .*outside 0..9"):
        nki.simulate(gather_rows)(data, idx)


def test_misuse_is_reported_at_the_kernel_line():
    @nki.jit
    def misuse(data, which):
        idx = nl.ndarray((128, 1), dtype=nl.uint32, buffer=nl.sbuf)
        t = nl.ndarray((128, 8), dtype=data.dtype, buffer=nl.sbuf)
        view = data.ap(pattern=[[8, 128], [1, 8]], vector_offset=idx, indirect_dim=0)
        if which == "compute":
            nisa.tensor_copy(dst=t, src=view)
        elif which == "slice":
            view[0:4]
        elif which == "both":
            data.ap(pattern=[[8, 128], [1, 8]], vector_offset=idx, scalar_offset=idx)
        elif which == "dim":
            data.ap(pattern=[[8, 128], [1, 8]], vector_offset=idx, indirect_dim=1)
        out = nl.ndarray((128, 8), dtype=data.dtype, buffer=nl.shared_hbm)
        return out

    data = np.zeros((256, 8), np.float32)
    for which, error, match in (("compute", UnsupportedError, "only nisa.dma_copy moves indirect"),
                                ("slice", UnsupportedError, "index of an indirect view"),
                                ("both", ConstraintError, "at most one"),
                                ("dim", ConstraintError, "indirect_dim=0 only")):
        with pytest.raises(error, match=match) as info:
            nki.simulate(misuse)(data, which)
        assert "test_indirect.py:" in str(info.value.location), which
