"""``nl`` random numbers: ``random_seed``, ``rand`` and ``dropout`` on VectorE's PRNG (``nisa.rng``)."""

from __future__ import annotations

import numpy as np

from neuronsim.errors import UnsupportedError
from neuronsim.nki import isa as _isa
from neuronsim.nki.language.creation import full
from neuronsim.nki.language.tensor import is_tile, new_tile, sim_dtype
from neuronsim.nki.trace import caller_location
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AluOp


def _no_mask(name: str, mask) -> None:
    if mask is not None:
        raise UnsupportedError(f"nl.{name}: mask= (predicated execution) is not simulated",
                               location=caller_location(3))


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the PRNG with a 32-bit value (a Python int, or a [1, 1] 32-bit tile): ``nisa.set_rng_seed``."""
    _no_mask("random_seed", mask)
    if not is_tile(seed):
        seed = full((1, 1), int(seed) & 0xFFFFFFFF, DType.uint32, name="random_seed")
    _isa.set_rng_seed(seed)


def rand(shape, dtype=np.float32, **kwargs):
    """A tile of uniform values in [0, 1): ``nisa.rng`` bits, their top 24 (exact in fp32) times 2**-24."""
    _no_mask("rand", kwargs.get("mask"))
    bits = new_tile(shape, DType.uint32, "rand.bits")
    _isa.rng(bits)
    _isa.tensor_scalar(bits, bits, AluOp.right_shift, 8)
    out = new_tile(shape, dtype, "rand")
    _isa.tensor_scalar(out, bits, AluOp.multiply, 2.0**-24)
    return out


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """``x`` with each element zeroed with probability ``rate`` (a scalar or a [P, 1] tile), unscaled
    as documented: ``nisa.dropout``, then a cast if ``dtype`` differs from x's."""
    _no_mask("dropout", mask)
    out = new_tile(x.shape, x.dtype, "dropout")
    _isa.dropout(out, x, rate)
    if dtype is None or sim_dtype(dtype) is x.buf.dtype:
        return out
    cast = new_tile(x.shape, dtype, "dropout.cast")
    _isa.tensor_copy(cast, out)
    return cast
