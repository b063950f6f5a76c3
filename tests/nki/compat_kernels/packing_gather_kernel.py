"""nisa.range_select, nisa.nc_n_gather and nisa.dma_compute as nki-library uses them: attention_bwd's
sequence-packing mask on a PSUM score tile, rotational_topk's local-to-global index gather, and
qkv_cte's residual add fused into the DMA that loads the input rows."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

FLOAT32_MIN = -3.4028235e38


@nki.jit
def packed_scores(qk, bound_min, bound_max, k_start):
    out = nl.ndarray(qk.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    row_max = nl.ndarray((qk.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    qk_psum = nl.ndarray(qk.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_copy(qk_psum, nl.load(qk))
    res = nl.ndarray(qk.shape, dtype=nl.float32, buffer=nl.sbuf)
    red = nl.ndarray((qk.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=res, on_true_tile=qk_psum, on_false_value=FLOAT32_MIN, comp_op0=nl.greater_equal,
                      comp_op1=nl.less, bound0=nl.load(bound_min), bound1=nl.load(bound_max),
                      range_start=k_start, reduce_res=red)
    nl.store(out, res)
    nl.store(row_max, red)
    return out, row_max


@nki.jit
def global_indices(indices, local_index):
    out = nl.ndarray(local_index.shape, dtype=indices.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray(local_index.shape, dtype=indices.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=g, data=nl.load(indices), indices=nl.load(local_index))
    nl.store(out, g)
    return out


@nki.jit
def residual_load(x, mlp_prev, attention_prev):
    S, H = x.shape
    out = nl.ndarray((S, H), dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.ndarray((S, H), dtype=x.dtype, buffer=nl.sbuf)
    srcs = [t.ap(pattern=[[H, S], [1, H]], offset=0) for t in (x, mlp_prev, attention_prev)]
    nisa.dma_compute(dst=rows, srcs=srcs, reduce_op=nl.add)
    nisa.dma_copy(dst=out, src=rows)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    qk = rng.standard_normal((128, 512)).astype(np.float32)
    lo = rng.integers(0, 600, (128, 1)).astype(np.float32)
    hi = lo + rng.integers(0, 300, (128, 1)).astype(np.float32)
    out, row_max = nki.simulate(packed_scores)(qk, lo, hi, 256)
    k = 256 + np.arange(512)[None, :]
    want = np.where((k >= lo) & (k < hi), qk, np.float32(FLOAT32_MIN))
    assert np.array_equal(out, want) and np.array_equal(row_max, want.max(axis=1, keepdims=True))

    ids = rng.permutation(64 * 300).astype(np.uint32).reshape(64, 300)
    local = rng.integers(0, 300, (64, 16)).astype(np.uint32)
    want = np.take_along_axis(ids, local.astype(int), 1)
    assert np.array_equal(nki.simulate(global_indices)(ids, local), want)

    x, m, a = (rng.standard_normal((100, 384)).astype(np.float32) for _ in range(3))
    assert np.array_equal(nki.simulate(residual_load)(x, m, a), (x + m) + a)
    print("NKI and NumPy match")
