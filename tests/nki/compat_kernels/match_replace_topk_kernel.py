"""nisa.nc_match_replace8 as nki-library's rotational_topk uses it: top-k by folds of max8 and an
in-place nc_match_replace8 that knocks the found values out with -inf, writing their indices."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

TOPK_PER_STAGE = 8


@nki.jit
def topk(x, k):
    rows, vocab = x.shape
    out_vals = nl.ndarray((rows, k), dtype=x.dtype, buffer=nl.shared_hbm)
    out_inds = nl.ndarray((rows, k), dtype=nl.uint32, buffer=nl.shared_hbm)
    data = nl.ndarray((rows, vocab), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=x)
    vals = nl.ndarray((rows, k), dtype=x.dtype, buffer=nl.sbuf)
    inds = nl.ndarray((rows, k), dtype=nl.uint32, buffer=nl.sbuf)
    for fold in nl.static_range(k // TOPK_PER_STAGE):
        cols = nl.ds(fold * TOPK_PER_STAGE, TOPK_PER_STAGE)
        nisa.max8(dst=vals[0:rows, cols], src=data[:, :vocab])
        nisa.nc_match_replace8(dst=data[:, :vocab], dst_idx=inds[0:rows, cols], data=data[:, :vocab],
                               vals=vals[0:rows, cols], imm=float("-inf"))
    nisa.dma_copy(dst=out_vals, src=vals)
    nisa.dma_copy(dst=out_inds, src=inds)
    return out_vals, out_inds


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    vals, inds = nki.simulate(topk)(x, 32)
    order = np.argsort(-x, axis=1, kind="stable")[:, :32]
    assert np.array_equal(inds, order)
    assert np.array_equal(vals, np.take_along_axis(x, order, axis=1))
    print("NKI and NumPy match")
