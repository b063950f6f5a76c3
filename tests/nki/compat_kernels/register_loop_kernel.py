"""A register trip count and a `while reg:` loop, as nki-library's dynamic_elementwise_add and
moe_cte's dynamic blocks write them."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

P_MAX, H_TILE = 128, 256


@nki.jit
def dynamic_add(input_a, input_b, num_m_tiles):
    m, hidden = input_a.shape
    result = nl.ndarray(shape=(m, hidden), dtype=input_a.dtype, buffer=nl.shared_hbm)
    num_sb = nl.ndarray(shape=(1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=num_sb, src=num_m_tiles[0])
    num_reg = nisa.register_alloc()
    nisa.register_load(num_reg, num_sb)
    m_start = nl.ndarray(shape=(1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=m_start, value=0)
    for _ in nl.dynamic_range(0, num_reg, 1):
        for h in nl.affine_range(hidden // H_TILE):
            pattern = [[hidden, P_MAX], [1, H_TILE]]
            a = nl.ndarray(shape=(P_MAX, H_TILE), dtype=input_a.dtype, buffer=nl.sbuf)
            b = nl.ndarray(shape=(P_MAX, H_TILE), dtype=input_b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=input_a.ap(pattern=pattern, offset=h * H_TILE, scalar_offset=m_start,
                                                indirect_dim=0))
            nisa.dma_copy(dst=b, src=input_b.ap(pattern=pattern, offset=h * H_TILE, scalar_offset=m_start,
                                                indirect_dim=0))
            nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
            nisa.dma_copy(dst=result.ap(pattern=pattern, offset=h * H_TILE, scalar_offset=m_start,
                                        indirect_dim=0), src=a)
        nisa.tensor_scalar(dst=m_start, data=m_start, op0=nl.add, operand0=P_MAX)
    return result


@nki.jit
def count_flags(conditions):
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    index = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    cond = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(index, value=0)
    nisa.dma_copy(dst=cond, src=conditions[0:1, 0:1])
    reg = nisa.register_alloc()
    nisa.register_load(reg, cond)
    while reg:
        nisa.tensor_scalar(index, index, op0=nl.add, operand0=1)
        nisa.dma_copy(dst=cond, src=conditions.ap(pattern=[[1, 1], [1, 1]], offset=0, scalar_offset=index,
                                                   indirect_dim=1))
        nisa.register_load(reg, cond)
    nisa.dma_copy(dst=count, src=index)
    return count


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3 * P_MAX, 2 * H_TILE)).astype(np.float32)
    b = rng.standard_normal((3 * P_MAX, 2 * H_TILE)).astype(np.float32)
    out = nki.simulate(dynamic_add)(a, b, np.array([[2]], np.int32))
    assert np.array_equal(out[: 2 * P_MAX], a[: 2 * P_MAX] + b[: 2 * P_MAX])
    flags = np.array([[1, 1, 1, 0, 1]], np.int32)
    assert nki.simulate(count_flags)(flags)[0, 0] == 3
    print("NKI and NumPy match")
