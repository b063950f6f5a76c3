"""The nisa calls AWS's kernel library needed beyond the first set (issue 18): each against a numpy
reference through the frontend, and its misuse errors with the kernel's file:line."""

import inspect

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError

RNG = np.random.default_rng(18)
THIS = __file__.rsplit("/", 1)[-1]


def raises_at(kernel, arrays, error, match):
    """Tracing ``kernel`` raises ``error`` matching ``match`` at the line marked ``# <- here``."""
    with pytest.raises(error, match=match) as info:
        kernel.specialize(arrays)
    source, first = inspect.getsourcelines(kernel.fn)
    line = first + next(i for i, text in enumerate(source) if "# <- here" in text)
    assert f"{THIS}:{line}" in str(info.value)


# ---------------------------------------------------------------- nc_stream_shuffle

def test_nc_stream_shuffle_permutes_each_quadrant():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    mask = [(i * 5) % 32 for i in range(32)]

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t, shuffle_mask=mask)
        nl.store(out, y)
        return out

    rows = [(i // 32) * 32 + mask[i % 32] for i in range(128)]
    assert np.array_equal(nki.simulate(k)(x), x[rows])


def test_nc_stream_shuffle_misuse_names_the_line():
    x = np.zeros((32, 8), np.float32)

    @nki.jit
    def wrong_dtype(a):
        t = nl.load(a)
        y = nl.ndarray((32, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t, shuffle_mask=[0] * 32)  # <- here
        return a

    @nki.jit
    def short_mask(a):
        t = nl.load(a)
        nisa.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[0] * 16)  # <- here
        return a

    @nki.jit
    def beyond_src(a):
        t = nl.load(a)
        y = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=y, src=t[0:4, :], shuffle_mask=[4] * 32)  # <- here
        return a

    raises_at(wrong_dtype, (x,), DtypeError, "dst must have src's dtype")
    raises_at(short_mask, (x,), ConstraintError, "list of 32 ints")
    raises_at(beyond_src, (x,), ConstraintError, "takes src partition 4.*has 4 partitions")
