"""nisa.topk (NKI 0.6) as nki-library's GpSIMD top-K kernel uses it: each row of a [R, V] bf16 input
becomes the 16-partition snake of its own GpSimd core by a blocked load (partition p holds the row's
elements p * cols .. p * cols + cols - 1, so snake position s = p + 16 c is element p * cols + c),
slots past V are padded with the most negative bf16, one topk call serves 8 rows, and the K
results (a snake again) are copied out with one strided DMA per tile. The numpy main de-snakes
them and checks values, order and indices against numpy."""
import math

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

GROUP, ROWS_PER_CALL = 16, 8
BF16_MIN = -3.3895314e38


@nki.jit
def gpsimd_topk(inp, k):
    rows, vocab = inp.shape
    cols = math.ceil(vocab / GROUP)
    k_cols = math.ceil(k / GROUP)
    values = nl.ndarray((rows, GROUP * k_cols), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    positions = nl.ndarray((rows, GROUP * k_cols), dtype=nl.uint32, buffer=nl.shared_hbm)
    full, partial = vocab // cols, vocab % cols
    flat = inp.reshape((rows * vocab,))
    for t in range(math.ceil(rows / ROWS_PER_CALL)):
        first = t * ROWS_PER_CALL
        n_rows = min(ROWS_PER_CALL, rows - first)
        par = n_rows * GROUP
        snake = nl.ndarray((par, cols), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=snake, value=BF16_MIN)
        for g in range(n_rows):
            start = (first + g) * vocab
            nisa.dma_copy(dst=snake[g * GROUP:g * GROUP + full, :],
                          src=flat.ap(pattern=[[cols, full], [1, cols]], offset=start))
            if partial:
                nisa.dma_copy(dst=snake[g * GROUP + full:g * GROUP + full + 1, 0:partial],
                              src=flat.ap(pattern=[[partial, 1], [1, partial]], offset=start + full * cols))
        val = nl.ndarray((par, GROUP * k_cols), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((par, GROUP * k_cols), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val[:, 0:k], idx_dst=idx[:, 0:k], src=snake, n=GROUP * cols)
        out_pattern = [[k_cols, par], [1, k_cols]]
        out_offset = first * GROUP * k_cols
        nisa.dma_copy(dst=values.ap(pattern=out_pattern, offset=out_offset), src=val[:, 0:k_cols])
        nisa.dma_copy(dst=positions.ap(pattern=out_pattern, offset=out_offset), src=idx[:, 0:k_cols])
    return values, positions


def de_snake(row: np.ndarray, k: int, k_cols: int) -> np.ndarray:
    """Result j of a row sits at column (j % 16) * k_cols + j // 16."""
    return np.array([row[(j % GROUP) * k_cols + j // GROUP] for j in range(k)])


if __name__ == "__main__":
    import ml_dtypes

    rng = np.random.default_rng(0)
    rows, vocab, k = 12, 200, 20
    inp = np.stack([rng.permutation(vocab) - 100 for _ in range(rows)]).astype(ml_dtypes.bfloat16)
    values, positions = nki.simulate(gpsimd_topk)(inp, k)
    cols, k_cols = math.ceil(vocab / GROUP), math.ceil(k / GROUP)
    for r in range(rows):
        v = de_snake(values[r], k, k_cols).astype(np.float32)
        s = de_snake(positions[r], k, k_cols).astype(np.int64)
        vocab_index = (s % GROUP) * cols + s // GROUP
        want = np.sort(inp[r].astype(np.float32))[-k:]
        assert np.array_equal(v, want), r
        assert np.array_equal(inp[r].astype(np.float32)[vocab_index], v), r
    print("NKI and NumPy match")
