"""Returning a reshaped HBM tensor, and nl.shared_constant from a .npy file."""
import os
import tempfile

import nki
import nki.language as nl
import numpy as np

ROTATION = os.path.join(tempfile.mkdtemp(), "rotation.npy")


@nki.jit
def rotate_max(x):
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    rot = nl.load(nl.shared_constant(ROTATION))
    nl.store(out, nl.max(nl.multiply(nl.load(x), rot), axis=1, keepdims=True))
    return out.reshape((1, x.shape[0], 1))


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    np.save(ROTATION, rng.standard_normal((4, 64)).astype(np.float32))
    x = rng.standard_normal((4, 64)).astype(np.float32)
    out = nki.simulate(rotate_max)(x)
    want = (x * np.load(ROTATION)).max(axis=1).reshape(1, 4, 1)
    assert out.shape == (1, 4, 1) and np.allclose(out, want)
    print("NKI and NumPy match")
