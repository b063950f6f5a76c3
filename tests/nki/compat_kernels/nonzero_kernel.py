"""nisa.nonzero_with_count as nki-library's find_nonzero_indices uses it: the columns of a [T, C]
mask are moved to partitions 0, 16, ..., 112 (the first partition of each GpSimd core), transposed
by TensorE so T runs along the free dim, and each core lists its column's nonzero positions in two
chunks of T (index_offset), padded with -1 and ending with the count."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

CORES, STRIDE = 8, 16  # GpSimd cores, partitions per core


@nki.jit
def nonzero_columns(mask):
    T, C = mask.shape
    chunk = 128
    out = nl.ndarray((C, T // chunk, chunk + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    identity = nl.shared_identity_matrix(128, dtype=nl.float32)
    for c in range(T // chunk):
        cols = nl.ndarray((128, C), dtype=mask.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=cols, src=mask[c * chunk:(c + 1) * chunk, :])
        spread = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=spread, value=0.0)
        for j in range(C):
            nisa.tensor_copy(dst=spread[:, j * STRIDE], src=cols[:, j], engine=nisa.engine.scalar)
        flipped = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=flipped, stationary=spread, moving=identity, is_transpose=True)
        rows = nl.ndarray((128, 128), dtype=mask.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=rows, src=flipped)
        found = nl.ndarray((128, chunk + 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=found, src=rows, index_offset=c * chunk, padding_val=-1)
        for j in range(C):
            nisa.dma_copy(dst=out[j, c:c + 1, :], src=found[j * STRIDE:j * STRIDE + 1, :])
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    T = 256
    mask = (rng.random((T, CORES)) < 0.1).astype(np.int32)
    got = nki.simulate(nonzero_columns)(mask)
    for j in range(CORES):
        for c in range(T // 128):
            found = np.flatnonzero(mask[c * 128:(c + 1) * 128, j]) + c * 128
            want = np.concatenate([found, np.full(128 - found.size, -1), [found.size]])
            assert np.array_equal(got[j, c], want), (j, c)
    print("NKI and NumPy match")
