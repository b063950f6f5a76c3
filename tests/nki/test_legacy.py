"""The legacy API (``neuronxcc.nki``): kernels written in NKI 0.1 style, one per construct, against numpy.

Index grids (``nl.arange``/``nl.mgrid``) and the indexing they drive, ``mask=``, ``nisa`` calls
returning results (computed into the tile they are assigned to, accumulated with ``+=``),
``nl.par_dim`` and block dimensions, ``nisa.iota``/``affine_select`` on index expressions,
``nki.baremetal``/``simulate_kernel``/``benchmark``/``profile``, and the migration hints.
"""

import json
import os

import numpy as np
import pytest

import neuronsim.nki.legacy as nki
import neuronsim.nki.legacy.isa as nisa
import neuronsim.nki.legacy.language as nl
from neuronsim.errors import OutOfBoundsError, UnsupportedError
from neuronsim.nki.legacy import hints
from neuronsim.sim.ir import Opcode

RNG = np.random.default_rng(3)


def opcodes(kernel, *args):
    prog = kernel.specialize(args).instances[0].programs[0]
    return [ins.opcode for ins in prog.instructions]


@nki.jit
def spmd_add(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 64 + nl.arange(64)[None, :]
    nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return c


def test_arange_grids_with_spmd_program_ids():
    a, b = RNG.random((256, 128), np.float32), RNG.random((256, 128), np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(spmd_add[2, 2], a, b), a + b, rtol=1e-6)


@nki.jit
def transpose_and_pool(x, pool):
    p, f = x.shape
    out_t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    out_p = nl.ndarray((p, f // 4 // pool, 4 // pool), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    i_p, i_a, i_b = nl.mgrid[0:p, 0:f // 4, 0:4]
    t = nl.ndarray((p, f), dtype=x.dtype)
    t[i_p, i_b * (f // 4) + i_a] = nl.copy(tile[i_p, i_a * 4 + i_b])  # [f/4, 4] -> [4, f/4] per row
    nl.store(out_t, value=t)
    # 2x2 average pool of each row seen as [f/4, 4]
    j0, j1, j2, j3, j4 = nl.mgrid[0:p, 0:f // 4 // pool, 0:pool, 0:4 // pool, 0:pool]
    pooled = nl.sum(tile[j0, (pool * j1 + j2) * 4 + pool * j3 + j4], axis=[2, 4]) / (pool * pool)
    nl.store(out_p, value=pooled)
    return out_t, out_p


def test_mgrid_access_patterns_transpose_and_pool():
    x = RNG.standard_normal((8, 32), np.float32)
    t, p = nki.simulate_kernel(transpose_and_pool, x, 2)
    np.testing.assert_array_equal(t, x.reshape(8, 8, 4).transpose(0, 2, 1).reshape(8, 32))
    ref = x.reshape(8, 4, 2, 2, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(p, ref, rtol=1e-5, atol=1e-6)


@nki.jit
def masked_relu(x):
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:f]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        tile = nl.load(x[rows, i_f], mask=(rows < n))
        r = nl.ndarray((nl.par_dim(128), f), dtype=x.dtype)
        r[i_p, i_f] = nisa.activation(nl.relu, tile, mask=(rows < n))
        nl.store(out[rows, i_f], value=r[i_p, i_f], mask=(rows < n))
    return out


def test_mask_tail_tiles_out_of_bounds_only_under_the_mask():
    x = RNG.standard_normal((200, 48), np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(masked_relu, x), np.maximum(x, 0))


@nki.jit
def unmasked_tail(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:x.shape[1]]
    for t in nl.affine_range(2):
        tile = nl.load(x[t * 128 + i_p, i_f])
        nl.store(out[t * 128 + i_p, i_f], value=tile)
    return out


def test_out_of_bounds_grid_without_mask_is_an_error_at_its_line():
    with pytest.raises(OutOfBoundsError) as err:
        nki.simulate_kernel(unmasked_tail, np.zeros((200, 8), np.float32))
    assert "dim 0 (size 200)" in str(err.value)
    assert err.value.location.endswith(f"test_legacy.py:{unmasked_tail.fn.__code__.co_firstlineno + 5}")


@nki.jit
def coupled_mask(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:128]
    nl.store(out[i_p, i_f], value=nl.load(x[i_p, i_f]), mask=(i_p >= i_f))
    return out


def test_non_rectangular_mask_is_unsupported():
    with pytest.raises(UnsupportedError, match="not a rectangle"):
        nki.simulate_kernel(coupled_mask, np.zeros((128, 128), np.float32))


@nki.jit
def matmul_accumulate(a_t, b):
    k, m = a_t.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((nl.par_dim(m), n), dtype=nl.float32, buffer=nl.psum)
    for kt in nl.affine_range(k // 128):
        lhs = nl.load(a_t[kt * 128:(kt + 1) * 128, :])
        rhs = nl.load(b[kt * 128:(kt + 1) * 128, :])
        acc[...] += nisa.nc_matmul(lhs, rhs)
    res = nl.ndarray((nl.par_dim(m), n), dtype=nl.float32)
    res[...] = nisa.tensor_copy(acc)
    nl.store(out, value=res)
    return out


def test_isa_results_go_into_the_tile_they_are_assigned_to():
    a_t = RNG.standard_normal((256, 64), np.float32)
    b = RNG.standard_normal((256, 96), np.float32)
    out = nki.simulate_kernel(matmul_accumulate, a_t, b)
    np.testing.assert_allclose(out, a_t.T @ b, rtol=1e-4, atol=1e-4)
    ops = opcodes(matmul_accumulate, a_t, b)
    # two matmuls accumulating in PSUM, one copy out of it: no copy per assignment
    assert ops.count(Opcode.NC_MATMUL) == 2
    assert ops.count(Opcode.TENSOR_COPY) == 1


@nki.jit
def blocks_and_selects(x):
    n = x.shape[1]
    out = nl.ndarray((2, 128, n), dtype=x.dtype, buffer=nl.shared_hbm)
    grid = nl.ndarray((1, 2, nl.par_dim(128), n), dtype=x.dtype, buffer=nl.sbuf)
    blocks = grid[0]  # the (2, par_dim(128), n) blocks of row 0
    i_p, i_f = nl.mgrid[0:128, 0:n]
    blocks[0, i_p, i_f] = nl.load(x[i_p, i_f])
    blocks[1] = nisa.affine_select(i_p - i_f >= 0, blocks[0], -1.0)  # causal: keep f <= p
    idx = nisa.iota(i_p * n + i_f, dtype=nl.float32)
    for b in nl.static_range(2):
        nl.store(out[b], value=nl.add(blocks[b], idx) if b == 0 else blocks[b])
    return out


def test_block_dims_iota_and_affine_select():
    x = RNG.standard_normal((128, 128), np.float32)
    out = nki.simulate_kernel(blocks_and_selects, x)
    idx = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    np.testing.assert_allclose(out[0], x + idx, rtol=1e-6)
    np.testing.assert_array_equal(out[1], np.where(np.tril(np.ones((128, 128), bool)), x, -1.0))


def test_benchmark_reports_the_simulated_latency_in_microseconds(tmp_path):
    a, b = RNG.random((256, 128), np.float32), RNG.random((256, 128), np.float32)
    trace = tmp_path / "bench.ntff"
    bench = nki.benchmark(warmup=5, iters=10, save_trace_name=str(trace))(spmd_add)[2, 2]
    np.testing.assert_allclose(bench(a, b), a + b, rtol=1e-6)
    lat = bench.benchmark_result.nc_latency
    total_us = bench.benchmark_result.profile.summary["total_time"] * 1e6
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) == pytest.approx(total_us)
    assert 0.5 < total_us < 100  # four 32 KiB tiles: microseconds, not seconds or nanoseconds
    assert json.loads(trace.read_text())["traceEvents"]
    with pytest.raises(ValueError):
        lat.get_latency_percentile(42)


def test_profile_writes_trace_listing_and_reports(tmp_path):
    a = RNG.random((256, 128), np.float32)
    prof = nki.profile(working_directory=str(tmp_path), save_neff_name="k.neff", save_trace_name="p.ntff",
                       num_execs=4, profile_nth=2)(spmd_add)[2, 2]
    np.testing.assert_allclose(prof(a, a), 2 * a, rtol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["json_reports", "k.neff", "p_exec_2.ntff", "p_exec_4.ntff"]
    assert len(os.listdir(tmp_path / "json_reports")) == 2
    assert "DMA_COPY" in (tmp_path / "k.neff").read_text()


def test_hints_once_per_construct_and_line_and_silenced(capsys, monkeypatch):
    monkeypatch.delenv("NEURON_SIM_NKI_HINTS", raising=False)
    hints._shown.clear()
    x = RNG.standard_normal((200, 48), np.float32)
    kernel = nki.jit(masked_relu.fn)  # a fresh cache: traced here
    nki.simulate_kernel(kernel, x)
    err = capsys.readouterr().err
    line = masked_relu.fn.__code__.co_firstlineno + 4  # the decorator's line + 4
    assert err.count(f"test_legacy.py:{line}: nl.mgrid -> slices") == 1
    assert "mask= -> bounded slices" in err
    assert "nisa.activation(...) returning its result -> nisa.activation(dst, ...)" in err
    assert "nki.simulate_kernel -> nki.simulate(kernel)(*arrays)" in err
    nki.simulate_kernel(kernel[2], x)  # traced again (another grid): the kernel's lines were shown
    err = capsys.readouterr().err
    assert "nl.mgrid" not in err and "mask=" not in err
    hints._shown.clear()
    monkeypatch.setenv("NEURON_SIM_NKI_HINTS", "0")
    nki.simulate_kernel(kernel[1, 1], x)
    assert capsys.readouterr().err == ""


LEGACY_FILE = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
from neuronxcc.nki.typing import tensor

@nki.jit
def double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t: tensor[128, 64] = nl.load(a[i_p, i_f])
    nl.store(out[i_p, i_f], value=nisa.tensor_scalar(t, np.multiply, 2.0))
    return out

a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
print("ok", bool((nki.simulate_kernel(double, a) == 2 * a).all()), nki.__name__)
'''


def test_neuronxcc_nki_resolves_under_neuron_sim(tmp_path):
    """``python -m neuronsim.nki legacy.py``: ``neuronxcc.nki`` is the legacy layer, hints on stderr."""
    import subprocess
    import sys

    path = tmp_path / "legacy_kernel.py"
    path.write_text(LEGACY_FILE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NEURON_SIM_NKI_HINTS")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(nki.__file__)).rsplit("/neuronsim", 1)[0]
    res = subprocess.run([sys.executable, "-m", "neuronsim.nki", str(path)], env=env, capture_output=True,
                         text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ok True neuronsim.nki.legacy" in res.stdout
    assert "legacy_kernel.py:13: nisa.tensor_scalar(...) returning its result" in res.stderr


@nki.jit
def scan_with_row_broadcast(x, row, acc_in):
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((p, 2, f), dtype=nl.float32)
    acc[:, 0, :] = nl.load(acc_in)  # t[:, i, :] is [P, F] (an int-indexed middle dim goes)
    acc[:, 1, :] = nl.load(x)
    r = nl.load(row[0:1, 0:f])
    wide = r.broadcast_to((p, f))  # NKI 0.1: a new tile, the row on every partition
    for i in nl.sequential_range(2, directives=nki.compiler.no_reorder()):
        acc[:, i, :] = nisa.tensor_tensor(acc[:, i, :], wide, op=nl.multiply)
    total = nisa.tensor_reduce(op=nl.add, data=acc[:, 0, :], axis=1)  # [P, 1]
    first = acc[:, 1, 0]  # t[:, i, 0]: a [P, 1] column
    for _j in nl.affine_range(1, precise_schedule=True):
        nl.store(out, value=acc[:, 1, :] + total + first)
    return out


def test_tile_broadcast_int_indexed_dims_and_scheduling_keywords():
    x, acc = RNG.standard_normal((128, 64), np.float32), RNG.standard_normal((128, 64), np.float32)
    row = RNG.standard_normal((4, 64), np.float32)
    out = scan_with_row_broadcast(x, row, acc)  # called directly: NKI 0.1's rules apply to @nki.jit too
    xr, ar = x * row[0], acc * row[0]
    ref = xr + ar.sum(axis=1, keepdims=True) + xr[:, :1]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@nki.jit
def batch_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.program_id(0)
    nl.store(out[b], value=nl.load(x[b]))
    return out


def test_launch_grid_of_zero_runs_one_instance():
    x = RNG.standard_normal((1, 128, 32), np.float32)
    np.testing.assert_array_equal(batch_copy[0](x), x)


@nki.jit
def pooled_rows(x):
    n, f = x.shape  # n is not a multiple of 128: the last tile's slices run past the end
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((n + 127) // 128):
        i_p = nl.arange(128)[:, None] + t * 128
        tile = nl.ndarray((128, f), dtype=x.dtype)
        nisa.dma_copy(src=x[t * 128:(t + 1) * 128, 0:f], dst=tile[:, :], mask=(i_p < n))
        acc = nl.full((128, 1), nl.finfo(x.dtype).min, dtype=nl.float32)
        acc[:, :] = nl.maximum(acc, nl.max(tile, axis=1, mask=(i_p < n)), mask=(i_p < n))
        nl.store(out[t * 128:(t + 1) * 128, :], value=acc, mask=(i_p < n))
    return out


def test_mask_binds_plain_slices_by_axis_past_the_end():
    x = RNG.standard_normal((200, 48), np.float32)
    np.testing.assert_array_equal(pooled_rows(x), x.max(axis=1, keepdims=True))


@nki.jit
def transposed_matmul(x, w):
    out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:128, 0:2, 0:64]
    assert g.y is g[2] and g.x is g[1]
    ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=x.dtype)
    eye = nl.load(ident)
    xt = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.psum)
    xt[...] = nisa.nc_matmul(nl.load(x), eye, is_transpose=True, mask=(3 < 4))  # bit-exact, x's dtype
    xs = nl.copy(xt)
    acc = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        acc[...] += nisa.nc_matmul(xs[:, k * 64:(k + 1) * 64], nl.load(w[k]), mask=(k < 2))
    nl.store(out, value=acc)
    return out


def test_transpose_mode_and_a_bool_mask_accumulating_in_psum():
    x = RNG.standard_normal((128, 128), np.float32).astype(np.float16)
    w = RNG.standard_normal((2, 128, 64), np.float32).astype(np.float16)
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    ref = sum(xf[k * 64:(k + 1) * 64] @ wf[k] for k in range(2))
    np.testing.assert_allclose(transposed_matmul(x, w), ref, rtol=2e-3, atol=2e-3)


@nki.jit
def fp32_times_bf16(x, y):
    out = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    scores = nl.multiply(nl.load(x), 1.0, dtype=nl.float32)  # an fp32 tile, as attn_fwd_v1's softmax
    nl.store(out, value=nl.matmul(scores, nl.load(y), transpose_x=True))
    return out


def test_legacy_matmul_promotes_a_bf16_operand_to_fp32():
    """NKI 0.1's nl ops compute in the input type of highest precision: attn_fwd_v1's fp32 scores
    times its bf16 V multiply in fp32 (TensorE pairs fp32 only with fp32)."""
    import ml_dtypes
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    y = RNG.standard_normal((128, 32)).astype(ml_dtypes.bfloat16)
    got = nki.simulate_kernel(fp32_times_bf16, x, y)
    np.testing.assert_allclose(got, x.T.astype(np.float64) @ y.astype(np.float64), rtol=1e-5, atol=1e-5)


@nki.jit
def deferred_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nisa.tensor_copy(t)  # recorded at the assignment below, located here
    res = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    res[...] = r
    nl.store(out, value=res)
    return out


def test_a_deferred_result_is_located_at_its_nisa_call_and_later_lines_at_theirs():
    prog = deferred_copy.specialize((np.zeros((128, 64), np.float32),)).instances[0].programs[0]
    first = deferred_copy.fn.__code__.co_firstlineno  # the decorator's line
    where = [(ins.opcode, ins.location.rsplit(":", 1)[1]) for ins in prog.instructions]
    assert where == [(Opcode.DMA_COPY, str(first + 3)), (Opcode.TENSOR_COPY, str(first + 4)),
                     (Opcode.DMA_COPY, str(first + 7))]
