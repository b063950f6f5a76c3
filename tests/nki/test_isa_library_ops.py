"""The nisa calls AWS's kernel library needed beyond the first set (issue 18): each against a numpy
reference through the frontend, and its misuse errors with the kernel's file:line. The compute ones
are in test_isa_library_compute_ops.py."""

import numpy as np
import pytest
from nki_checks import raises_at

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError, UnsupportedError
from neuronsim.sim.chips import get_chip
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.ir import Opcode

RNG = np.random.default_rng(18)


# ---------------------------------------------------------------- nc_stream_shuffle

def test_nc_stream_shuffle_permutes_each_quadrant():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    mask = [(i * 5) % 32 for i in range(32)]

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t, shuffle_mask=mask)
        nl.store(out, y)
        return out

    rows = [(i // 32) * 32 + mask[i % 32] for i in range(128)]
    assert np.array_equal(nki.simulate(k)(x), x[rows])


def test_nc_stream_shuffle_misuse_names_the_line():
    x = np.zeros((32, 8), np.float32)

    @nki.jit
    def wrong_dtype(a):
        t = nl.load(a)
        y = nl.ndarray((32, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t, shuffle_mask=[0] * 32)  # <- here
        return a

    @nki.jit
    def short_mask(a):
        t = nl.load(a)
        nisa.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[0] * 16)  # <- here
        return a

    @nki.jit
    def beyond_src(a):
        t = nl.load(a)
        y = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t[0:4, :], shuffle_mask=[4] * 32)  # <- here
        return a

    raises_at(wrong_dtype, (x,), DtypeError, "dst must have src's dtype")
    raises_at(short_mask, (x,), ConstraintError, "list of 32 ints")
    raises_at(beyond_src, (x,), ConstraintError, "takes src partition 4.*has 4 partitions")


# ---------------------------------------------------------------- dma_transpose of 4-d views

def test_dma_transpose_of_3d_and_4d_views():
    """attention_tkg transposes [s, 1, 1, d] views by (3, 1, 2, 0): the 2-D transpose [s, d] -> [d, s];
    (2, 1, 0) and (3, 1, 2, 0) keep the middle dims, so a [s, m, d] src is m 2-D transposes."""
    x = RNG.standard_normal((2, 64, 32)).astype(np.float32).astype(np.float16)

    @nki.jit
    def k(a):
        out = nl.ndarray((32, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((32, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t.reshape((32, 1, 1, 64)), a[1].reshape((64, 1, 1, 32)))
        nl.store(out, t)
        return out

    assert np.array_equal(nki.simulate(k)(x), x[1].T)

    y = RNG.standard_normal((64, 3, 32)).astype(np.float16)

    @nki.jit
    def middle(a):
        out = nl.ndarray((32, 3, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((32, 3, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t, a, axes=(2, 1, 0))  # attention_cte: one 2-D transpose per middle index
        nl.store(out, t)
        return out

    assert np.array_equal(nki.simulate(middle)(y), y.transpose(2, 1, 0))

    @nki.jit
    def wrong_axes(a):
        t = nl.ndarray((32, 3, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t, a, axes=(1, 0, 2))  # <- here
        return a

    raises_at(wrong_axes, (y,), UnsupportedError, r"axes=\(1, 0, 2\)")


# ---------------------------------------------------------------- nc_match_replace8

def test_nc_match_replace8_folds_top_k_in_place():
    """rotational_topk's loop: max8, then nc_match_replace8 on data in place with -inf, per 8."""
    x = RNG.permutation(16 * 300).astype(np.float32).reshape(16, 300)

    @nki.jit
    def top24(a):
        vals = nl.ndarray((16, 24), dtype=a.dtype, buffer=nl.shared_hbm)
        inds = nl.ndarray((16, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
        data = nl.load(a)
        v = nl.ndarray((16, 24), dtype=a.dtype, buffer=nl.sbuf)
        i = nl.ndarray((16, 24), dtype=nl.uint32, buffer=nl.sbuf)
        for fold in range(3):
            cols = nl.ds(fold * 8, 8)
            nisa.max8(dst=v[:, cols], src=data)
            nisa.nc_match_replace8(dst=data, dst_idx=i[:, cols], data=data, vals=v[:, cols],
                                   imm=float("-inf"))
        nl.store(vals, v)
        nl.store(inds, i)
        return vals, inds

    vals, inds = nki.simulate(top24)(x)
    order = np.argsort(-x, axis=1)[:, :24]
    assert np.array_equal(inds, order) and np.array_equal(vals, np.take_along_axis(x, order, axis=1))


def test_nc_match_replace8_misuse_names_the_line():
    x = np.zeros((16, 64), np.float32)

    @nki.jit
    def float_idx(a):
        t = nl.load(a)
        v = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=t, data=t, vals=v, imm=0.0, dst_idx=v)  # <- here
        return a

    @nki.jit
    def wide_vals(a):
        t = nl.load(a)
        nisa.nc_match_replace8(dst=t, data=t, vals=t[:, 0:16], imm=0.0)  # <- here
        return a

    raises_at(float_idx, (x,), DtypeError, "dst_idx must be uint16 or uint32")
    raises_at(wide_vals, (x,), ConstraintError, r"vals must be \[16, 8\]")


# ---------------------------------------------------------------- range_select

def test_range_select_masks_a_psum_tile_by_bounds():
    """attention_bwd's sequence packing: qk in PSUM masked to k in [bound_min[q], bound_max[q]) from
    k_tile_start, with the row max."""
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    lo = RNG.integers(1000, 1200, (128, 1)).astype(np.float32)
    hi = lo + RNG.integers(0, 150, (128, 1)).astype(np.float32)

    @nki.jit
    def k(a, bound_min, bound_max):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        mx = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        qk = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(qk, nl.load(a))
        res = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        red = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=res, on_true_tile=qk, on_false_value=-3.4028235e38, comp_op0=nl.greater_equal,
                          comp_op1=nl.less, bound0=nl.load(bound_min), bound1=nl.load(bound_max),
                          range_start=1024, reduce_res=red)
        nl.store(out, res)
        nl.store(mx, red)
        return out, mx

    out, mx = nki.simulate(k)(x, lo, hi)
    index = 1024 + np.arange(256)[None, :]
    sel = np.where((index >= lo) & (index < hi), x, np.finfo(np.float32).min)
    assert np.array_equal(out.astype(np.float32), sel.astype(out.dtype).astype(np.float32))
    assert np.array_equal(mx, sel.max(axis=1, keepdims=True))


def test_range_select_misuse_names_the_line():
    x = np.zeros((128, 64), np.float32)

    @nki.jit
    def not_equal(a):
        t = nl.load(a)
        b = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=t, on_true_tile=t, comp_op0=nl.not_equal, comp_op1=nl.less, bound0=b,  # <- here
                          bound1=b)
        return a

    @nki.jit
    def zero_fill(a):
        t = nl.load(a)
        b = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=t, on_true_tile=t, comp_op0=nl.less, comp_op1=nl.less, bound0=b,  # <- here
                          bound1=b, on_false_value=0.0)
        return a

    raises_at(not_equal, (x,), ConstraintError, "comp_op0=not_equal")
    raises_at(zero_fill, (x,), ConstraintError, "fills with FP32_MIN")


# ---------------------------------------------------------------- nc_n_gather

def test_nc_n_gather_maps_local_top_k_positions_to_global_indices():
    """rotational_topk: global_index = nc_n_gather(data=indices, indices=local_index)."""
    ids = RNG.permutation(32 * 100).astype(np.uint32).reshape(32, 100)
    local = RNG.integers(0, 100, (32, 8)).astype(np.uint32)

    @nki.jit
    def k(a, pos):
        out = nl.ndarray(pos.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        g = nl.ndarray(pos.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=g, data=nl.load(a), indices=nl.load(pos))
        nl.store(out, g)
        return out

    want = np.take_along_axis(ids, local.astype(np.int64), axis=1)
    assert np.array_equal(nki.simulate(k)(ids, local), want)


def test_nc_n_gather_misuse_names_the_line():
    x = np.zeros((32, 64), np.float32)

    @nki.jit
    def int32_indices(a):
        t = nl.load(a)
        i = nl.ndarray((32, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=t[:, 0:8], data=t, indices=i)  # <- here
        return a

    raises_at(int32_indices, (x,), DtypeError, "indices must be uint32")


# ---------------------------------------------------------------- nc_matmul perf_mode=double_row

def _fp8_matmul_kernel(double_row: bool):
    @nki.jit
    def k(a, b):
        out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
        sa = nl.ndarray(a.shape, dtype=nl.float8_e4m3, buffer=nl.sbuf)
        sb = nl.ndarray(b.shape, dtype=nl.float8_e4m3, buffer=nl.sbuf)
        nisa.dma_copy(dst=sa, src=a)
        nisa.dma_copy(dst=sb, src=b)
        acc = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.psum)
        if double_row:
            nisa.nc_matmul(acc, sa, sb, perf_mode=nisa.matmul_perf_mode.double_row)
        else:
            for r in range(2):
                nisa.nc_matmul(acc, sa[:, r, :], sb[:, r, :])
        nl.store(out, acc)
        return out

    return k


def test_fp8_double_row_contracts_both_rows_in_one_pass():
    """S16/S10: [K, 2, M] x [K, 2, N] FP8 contracts over K x 2 in the time of one pass: the same values
    as two plain matmuls accumulating, in half their TensorE time."""
    import ml_dtypes

    a = RNG.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e4m3)
    b = RNG.standard_normal((128, 2, 512)).astype(ml_dtypes.float8_e4m3)
    want = np.einsum("krm,krn->mn", a.astype(np.float32), b.astype(np.float64)).astype(np.float32)
    charged = {}
    for double_row in (True, False):
        kernel = _fp8_matmul_kernel(double_row)
        np.testing.assert_allclose(nki.simulate(kernel)(a, b), want, rtol=1e-5, atol=1e-4)
        program = kernel.specialize((a, b)).instances[0].programs[0]
        charged[double_row] = sum(OPDEFS[i.opcode].cycles(i, get_chip("trn2")) for i in program.instructions
                                  if i.opcode is Opcode.NC_MATMUL)
    assert charged[True] == charged[False] / 2 == 512  # one pass of N = 512 moving columns


def test_fp8_double_row_misuse_names_the_line():
    x = np.zeros((128, 2, 64), np.float32)

    @nki.jit
    def bf16_double_row(a):
        s = nl.ndarray((128, 2, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, s, s, perf_mode=nisa.matmul_perf_mode.double_row)  # <- here
        return a

    raises_at(bf16_double_row, (x,), DtypeError, "double_row takes FP8 operands")


# ---------------------------------------------------------------- dma_compute

def test_dma_compute_fuses_a_residual_add_into_the_load():
    """qkv_cte: input + mlp_prev + attention_prev rows from HBM summed by the DMA into SBUF; 6 sources
    chain through dst."""
    xs = [RNG.standard_normal((96, 200)).astype(np.float32) for _ in range(6)]

    @nki.jit
    def k(a, b, c, d, e, f):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_compute(dst=t, srcs=[a.ap(pattern=[[200, 96], [1, 200]], offset=0), b, c], reduce_op=nl.add)
        u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_compute(dst=u, srcs=[t, a, b, c, d, e, f], reduce_op=nl.add, scales=[1.0] * 7)
        nl.store(out, u)
        return out

    three = (xs[0] + xs[1]) + xs[2]
    want = three
    for x in xs:
        want = want + x
    np.testing.assert_array_equal(nki.simulate(k)(*xs), want)


def test_dma_compute_misuse_names_the_line():
    x = np.zeros((8, 8), np.float32)

    @nki.jit
    def scaled(a):
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=t, srcs=[a, a], reduce_op=nl.add, scales=[1.0, 2.0])  # <- here
        return a

    raises_at(scaled, (x,), ConstraintError, "scales of 1.0 only")


# ---------------------------------------------------------------- VectorE's PSUM limit with a broadcast

def test_a_psum_row_broadcast_past_4k_elements_streams():
    """layernorm_tkg: x [128, BxS, H1] - mean [128, BxS] (PSUM) broadcast along H1: the PSUM operand
    reaches BxS elements per partition (<= 4K) while the access streams BxS * H1 (> 4K)."""
    x = RNG.standard_normal((128, 200, 24)).astype(np.float32)
    m = RNG.standard_normal((128, 200)).astype(np.float32)

    @nki.jit
    def k(a, mean):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        mp = nl.ndarray(mean.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(mp, nl.load(mean))
        nisa.tensor_tensor(t, t, mp.ap([[200, 128], [1, 200], [0, 24]]), nl.subtract)
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(x, m), x - m[:, :, None])

    @nki.jit
    def too_wide(a, mean):
        t = nl.load(a)
        mp = nl.ndarray((128, 4100), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.memset(mp, 0.0)
        nisa.tensor_copy(t[:, 0, 0:1], mp[:, 0:1])
        return a

    with pytest.raises(ConstraintError, match="4100 elements per partition of PSUM.*limit is 4096"):
        nki.simulate(too_wide)(x, m)


# ---------------------------------------------------------------- nonzero_with_count

def test_nonzero_with_count_misuse_names_the_line():
    x = np.zeros((128, 64), np.float32)

    @nki.jit
    def no_count_slot(a):
        t = nl.load(a)
        out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=out, src=t)  # <- here
        return a

    @nki.jit
    def float_dst(a):
        out = nl.ndarray((128, 65), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=out, src=nl.load(a))  # <- here
        return a

    @nki.jit
    def float_offset(a):
        out = nl.ndarray((128, 65), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=out, src=nl.load(a), index_offset=0.5)  # <- here
        return a

    raises_at(no_count_slot, (x,), ConstraintError, "one more element per partition")
    raises_at(float_dst, (x,), DtypeError, "dst must be int32")
    raises_at(float_offset, (x,), ConstraintError, "index_offset=0.5 must be an int32")


# ---------------------------------------------------------------- local_gather

def test_local_gather_matches_the_sdk_numpy_semantics():
    """The SDK's test_nki_isa_local_gather.py: each core's 16 partitions of indices, flattened
    partition first, pick num_elem_per_idx elements of every partition of that core."""
    src = (RNG.random((128, 512, 4)) * 100).astype(np.float32)
    per_core = RNG.integers(0, 512, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    n, k = 4, 64

    @nki.jit
    def gather(src_buffer, idx):
        out = nl.ndarray((128, 4, 16, 4), dtype=src_buffer.dtype, buffer=nl.shared_hbm)
        got = nl.ndarray((128, 4, 16, 4), dtype=src_buffer.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=got, src_buffer=nl.load(src_buffer), index=nl.load(idx), num_elem_per_idx=n,
                          num_valid_indices=k)
        nl.store(out, got)
        return out

    want = np.empty((128, k, n), np.float32)
    for core in range(8):
        rows = slice(core * 16, (core + 1) * 16)
        want[rows] = np.take(src[rows], index[rows].flatten(order="F")[:k], axis=1)
    got = nki.simulate(gather)(src, (index * n).astype(np.uint16))
    assert np.array_equal(got, want.reshape(128, 4, 16, 4))


def test_local_gather_misuse_names_the_line():
    x = np.zeros((128, 64), np.float32)

    @nki.jit
    def int32_index(a):
        t = nl.load(a)
        i = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.local_gather(dst=t, src_buffer=t, index=i)  # <- here
        return a

    @nki.jit
    def wrong_dst_size(a):
        t = nl.load(a)
        i = nl.ndarray((128, 2), dtype=nl.uint16, buffer=nl.sbuf)  # 32 indices a core: dst needs 32
        nisa.local_gather(dst=t, src_buffer=t, index=i)  # <- here
        return a

    raises_at(int32_index, (x,), DtypeError, "index must be uint16")
    raises_at(wrong_dst_size, (x,), ConstraintError, r"num_valid_indices \* num_elem_per_idx = 32")


# ---------------------------------------------------------------- sequence_bounds

def test_sequence_bounds_of_packed_segments():
    """S16's example through the frontend: int32 ids in, int32 [1, 2, n] bounds out; a multi-row
    id tile is a located error."""
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)

    @nki.jit
    def k(s):
        out = nl.ndarray((1, 2, s.shape[1]), dtype=s.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray((1, 2, s.shape[1]), dtype=s.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=b, segment_ids=nl.load(s))
        nl.store(out, b)
        return out

    got = nki.simulate(k)(ids)
    assert got.tolist() == [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]]

    @nki.jit
    def rows(s):
        t = nl.load(s)
        b = nl.ndarray((2, 2, 9), dtype=s.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=b, segment_ids=t)  # <- here
        return s
    raises_at(rows, [np.zeros((2, 9), np.int32)], ConstraintError, "one partition")
