"""nisa.nc_stream_shuffle as nki-library uses it: stream_shuffle_broadcast (partition 0 onto every
partition, one 32-partition quadrant per call) and a quadrant realignment leaving partitions
unmodified (mask entries of 255, as core/utils/cross_partition_copy.py does)."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

QUADRANT = 32
KEEP = 255


def stream_shuffle_broadcast(src, dst):
    shuffle_mask = [0] * QUADRANT
    for i in range((dst.shape[0] + QUADRANT - 1) // QUADRANT):
        cur = min(QUADRANT, dst.shape[0] - i * QUADRANT)
        nisa.nc_stream_shuffle(src=src[0:1, :], dst=dst[i * QUADRANT:i * QUADRANT + cur, 0:dst.shape[1]],
                               shuffle_mask=shuffle_mask)


@nki.jit
def broadcast_first_row(x):
    rows, cols = 100, x.shape[1]
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    dst = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    stream_shuffle_broadcast(src, dst)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def shift_into_quadrant(x, shift):
    """Rows 0..n-1 of x land at rows shift..shift+n-1 of a zeroed quadrant; the rest stay zero."""
    n, cols = x.shape
    out = nl.ndarray((QUADRANT, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    temp_src = nl.ndarray((QUADRANT, cols), dtype=x.dtype, buffer=nl.sbuf)
    temp_dst = nl.ndarray((QUADRANT, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=temp_src, value=0.0)
    nisa.memset(dst=temp_dst, value=0.0)
    nisa.dma_copy(dst=temp_src[0:n, :], src=x)
    mask = [KEEP] * QUADRANT
    for i in range(n):
        mask[shift + i] = i
    nisa.nc_stream_shuffle(dst=temp_dst, src=temp_src, shuffle_mask=mask)
    nisa.dma_copy(dst=out, src=temp_dst)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 96)).astype(np.float32)
    assert np.array_equal(nki.simulate(broadcast_first_row)(x), np.repeat(x[:1], 100, axis=0))
    y = rng.standard_normal((5, 16)).astype(np.float32)
    want = np.zeros((QUADRANT, 16), np.float32)
    want[7:12] = y
    assert np.array_equal(nki.simulate(shift_into_quadrant)(y, 7), want)
    print("NKI and NumPy match")
