"""nl.add of a [1, F] tile and a [128, F] tile, and nl.broadcast_to, broadcasting across partitions."""
import nki
import nki.language as nl
import numpy as np


@nki.jit
def add_bias_row(x, bias):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.load(bias)  # [1, F]
    nl.store(out, nl.add(nl.load(x), row))
    return out


@nki.jit
def tile_row(bias):
    out = nl.ndarray((128, bias.shape[1]), dtype=bias.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.broadcast_to(nl.load(bias), (128, bias.shape[1])))
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    bias = rng.standard_normal((1, 512)).astype(np.float32)
    assert np.array_equal(nki.simulate(add_bias_row)(x, bias), x + bias)
    assert np.array_equal(nki.simulate(tile_row)(bias), np.broadcast_to(bias, (128, 512)))
    print("NKI and NumPy match")
