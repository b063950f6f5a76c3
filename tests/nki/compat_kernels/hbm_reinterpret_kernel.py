"""nki-library's mxfp_load: an HBM tensor's bytes read as another dtype (bf16 pairs as float32 words,
``tensor.ap(pattern, dtype=nl.float32)``), moved per block in an ``nl.range`` loop."""
import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

BLOCK = 64  # float32 words (128 bf16 values) per block


@nki.jit
def swap_blocks(tensor):
    """Reverses the order of the [M, BLOCK]-word blocks of a bf16 [M, K] tensor, moving words."""
    m, k = tensor.shape
    words = k // 2
    out = nl.ndarray((m, k), dtype=tensor.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((m, words), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=tensor.ap(pattern=[[words, m], [1, words]], dtype=nl.float32))
    n = words // BLOCK
    for b in nl.range(n):
        dst = out.ap(pattern=[[words, m], [1, BLOCK]], offset=(n - 1 - b) * BLOCK, dtype=nl.float32)
        nisa.dma_copy(dst=dst, src=sb[:, b * BLOCK:(b + 1) * BLOCK])
    return out


if __name__ == "__main__":
    x = np.random.default_rng(0).standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    out = nki.simulate(swap_blocks)(x)
    want = x.reshape(128, 4, 128)[:, ::-1, :].reshape(128, 512)
    assert out.dtype == x.dtype and np.array_equal(out.view(np.uint16), want.view(np.uint16))
    print("NKI and NumPy match")
