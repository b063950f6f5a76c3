"""NKI 0.6 names: nl.mod, nl.var, nl.expand_dims, the buffer predicates, nisa.get_nc_sub_version."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def stats(x):
    assert nl.is_hbm(x.buffer) and nisa.get_nc_sub_version() == 0
    t = nl.load(x)
    assert nl.is_sbuf(t.buffer) and nl.is_on_chip(t.buffer) and nl.expand_dims(t, 1).shape == (128, 1, 32)
    m_out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    v_out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(m_out, nl.mod(t, 3.0))
    nl.store(v_out, nl.var(t, axis=1))
    return m_out, v_out


if __name__ == "__main__":
    x = (np.random.default_rng(0).standard_normal((128, 32)) * 10).astype(np.float32)
    m, v = nki.simulate(stats)(x)
    assert np.allclose(m, np.mod(x, 3.0), atol=1e-4)
    assert np.allclose(v, x.var(axis=1, keepdims=True), rtol=1e-4)
    print("NKI and NumPy match")
