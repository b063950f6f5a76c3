"""NKI kernels the torch_neuronx tests call: the shapes of the TorchNeuron docs' and tests' examples
(tiled element-wise add on a launch grid, a kernel writing an argument in place and returning it,
an in-place scaled add with a constant, several outputs)."""

from __future__ import annotations

import neuronsim.nki as nki
import neuronsim.nki.language as nl

P, F = 128, 512  # one tile per SPMD instance


def _tile():
    i, j = nl.program_id(0), nl.program_id(1)
    return slice(i * P, (i + 1) * P), slice(j * F, (j + 1) * F)


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = _tile()
    nl.store(out[rows, cols], nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out


@nki.jit
def add_alias_mul(a, b):
    """Writes a + b into ``a``; returns (a * b, a)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = _tile()
    x, y = nl.load(a[rows, cols]), nl.load(b[rows, cols])
    nl.store(a[rows, cols], nl.add(x, y))
    nl.store(out[rows, cols], nl.multiply(x, y))
    return out, a


@nki.jit
def scaled_add_inplace(a, scale, b):
    """b += a * scale (``scale`` a trace-time constant)."""
    rows, cols = _tile()
    nl.store(b[rows, cols], nl.add(nl.multiply(nl.load(a[rows, cols]), scale), nl.load(b[rows, cols])))
    return b


@nki.jit
def two_outputs(a, b, c):
    ab = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ac = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(ab, nl.add(x, nl.load(b)))
    nl.store(ac, nl.add(x, nl.load(c)))
    return ab, ac


def grid_of(a, b):
    return [a.shape[0] // P, b.shape[1] // F]
