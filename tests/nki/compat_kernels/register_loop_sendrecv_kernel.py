"""A `sendrecv` and a `core_barrier` inside a loop on a register, LNC=2: nki-library's moe_cte
(`blockwise_mm_baseline_shard_intermediate_hybrid`) loops over its padded blocks with
`nl.dynamic_range` up to a count read from HBM, and in every block the two cores, each holding half
of the contraction, exchange their partial sums."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

P_MAX, F = 128, 256
HALF = P_MAX // 2


@nki.jit
def sharded_block_sums(x, weights, n_blocks):
    """Block ``b`` (rows ``b*128`` on) of the result is ``weights[0] * x[rows, :F] + weights[1] *
    x[rows, F:]``: core ``s`` computes its term, the cores swap terms, and each stores half the rows."""
    out = nl.ndarray((x.shape[0], F), dtype=x.dtype, buffer=nl.shared_hbm)
    shard = nl.program_id(0)
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count, src=n_blocks[0:1, 0:1])
    count_reg = nisa.register_alloc()
    nisa.register_load(count_reg, count)
    weight = nl.ndarray((P_MAX, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=weight, src=weights.ap(pattern=[[0, P_MAX], [1, 1]], offset=shard))
    row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(row, value=0)
    for _ in nl.dynamic_range(0, count_reg):
        part = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=part, src=x.ap(pattern=[[2 * F, P_MAX], [1, F]], offset=shard * F,
                                         scalar_offset=row, indirect_dim=0))
        mine = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=mine, data=part, op0=nl.multiply, operand0=weight)
        theirs = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - shard, recv_from_rank=1 - shard, pipe_id=0)
        total = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
        nisa.dma_copy(dst=out.ap(pattern=[[F, HALF], [1, F]], offset=shard * HALF * F, scalar_offset=row,
                                 indirect_dim=0), src=total[nl.ds(shard * HALF, HALF), :])
        nisa.core_barrier(out, (0, 1))
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=P_MAX)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    blocks = 4
    x = rng.standard_normal((blocks * P_MAX, 2 * F)).astype(np.float32)
    weights = np.array([[1.5], [-0.25]], np.float32)
    out = nki.simulate(sharded_block_sums[2])(x, weights, np.array([[3]], np.int32))
    expected = weights[0, 0] * x[:, :F] + weights[1, 0] * x[:, F:]
    # the first three blocks; both cores round the same two float32 terms in the same order
    first = slice(0, 3 * P_MAX)
    assert np.array_equal(out[first], expected[first]), np.abs(out[first] - expected[first]).max()
    print("NKI and NumPy match")
