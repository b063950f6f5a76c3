"""``nl`` dtypes and memory buffers: ``nl.float32``, ``nl.bfloat16``..., ``nl.sbuf``, ``nl.psum``,
``nl.shared_hbm``..., ``nl.fp32`` limits, ``nl.ds`` (see ``nki/types.py`` for the value types)."""

from __future__ import annotations

import numpy as np

from neuronsim.nki import types as _types
from neuronsim.nki.types import DynSlice, MemoryRegion
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Memory

_D = _types.DTYPES
bool_ = _D[DType.bool_]
int8, int16, int32 = _D[DType.int8], _D[DType.int16], _D[DType.int32]
uint8, uint16, uint32 = _D[DType.uint8], _D[DType.uint16], _D[DType.uint32]
float16, float32 = _D[DType.float16], _D[DType.float32]
bfloat16, tfloat32 = _D[DType.bfloat16], _D[DType.tfloat32]
float8_e4m3, float8_e5m2 = _D[DType.float8_e4m3], _D[DType.float8_e5m2]
float8_e4m3fn = _D[DType.float8_e4m3fn]
DTYPE_MEMO = {nd: d for d, nd in _D.items()}  # keyed by the canonical objects: identity hits
# The x4-packed MX data types and the E8M0 scale type (NeuronCore-v4; see types.MX_STORAGE).
float8_e5m2_x4, float8_e4m3fn_x4 = _types.MX_DTYPES["float8_e5m2_x4"], _types.MX_DTYPES["float8_e4m3fn_x4"]
float4_e2m1fn_x4, float8_e8m0fnu = _types.MX_DTYPES["float4_e2m1fn_x4"], _types.MX_DTYPES["float8_e8m0fnu"]


class fp32:
    """float32 limits (``nl.fp32.min`` is the most negative finite float32)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)
    eps = float(np.finfo(np.float32).eps)


sbuf, psum, hbm, private_hbm, shared_hbm = (
    _types.sbuf,
    _types.psum,
    _types.hbm,
    _types.private_hbm,
    _types.shared_hbm,
)
MemoryRegion = MemoryRegion
ds = DynSlice


class NKIObject:
    """Base class of kernel dataclasses and configuration objects. Built with keyword arguments
    (``Params(section_idx=0)``) it sets them as attributes, as NKI's ``NKIObject.__init__(**kwargs)``
    does; a ``@dataclass`` subclass has its own ``__init__``, with Python's rules."""

    def __init__(self, **kwargs) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)


def is_hbm(buffer) -> bool:
    """True for ``nl.hbm``, ``nl.private_hbm`` and ``nl.shared_hbm``."""
    return _types.region_of(buffer).memory is Memory.HBM


def is_on_chip(buffer) -> bool:
    """True for ``nl.sbuf`` and ``nl.psum``."""
    return _types.region_of(buffer).memory is not Memory.HBM


def is_psum(buffer) -> bool:
    return _types.region_of(buffer).memory is Memory.PSUM


def is_sbuf(buffer) -> bool:
    return _types.region_of(buffer).memory is Memory.SBUF
