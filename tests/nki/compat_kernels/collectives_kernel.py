"""nki.collectives as nki-library's collective kernels use them: an HBM all-gather, a rank's slice
picked with rank_id() as a scalar offset, and an SBUF all-gather along the free dim, on a launch
over 4 ranks (LNC=2 each) whose ranks have their own inputs."""

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import numpy as np
from nki.collectives import ReplicaGroup


@nki.jit
def gather_and_pick(x, table, replica_group, ranks):
    H, W = x.shape
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    gathered = nl.ndarray((H * ranks, W), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(dsts=[gathered], srcs=[src], replica_group=replica_group, collective_dim=0)
    mine = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=mine,
                  src=table.ap(pattern=[[W, H], [1, W]], scalar_offset=ncc.rank_id(), indirect_dim=0))
    wide_in = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=wide_in, src=x)
    wide = nl.ndarray((H, W * ranks), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(dsts=[wide], srcs=[wide_in], replica_group=replica_group, collective_dim=1)
    rows = nl.ndarray((H, W * ranks), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=rows, src=wide)
    return gathered, mine, rows


if __name__ == "__main__":
    from neuronsim.nki import simulate_ranks

    ranks = 4
    xs = np.random.default_rng(0).standard_normal((ranks, 128, 64)).astype(np.float32)
    group = ReplicaGroup([list(range(ranks))])
    outs = simulate_ranks(gather_and_pick[2], ranks)(
        lambda r: {"x": xs[r], "table": xs, "replica_group": group, "ranks": ranks})
    for r, (gathered, mine, rows) in enumerate(outs):
        assert np.array_equal(gathered, xs.reshape(ranks * 128, 64)), r
        assert np.array_equal(mine, xs[r]), r
        assert np.array_equal(rows, np.concatenate(list(xs), axis=1)), r
    print("NKI and NumPy match")
