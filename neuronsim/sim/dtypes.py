"""The dtypes a NeuronCore stores, with the small integer codes the executors use.

Engines compute in fp32; these are storage formats. Low-precision float writes round to nearest
even (see ``memory/numerics.py``). ``float8_e4m3`` is Trainium2's IEEE-style e4m3 (bias 7, with
inf/NaN, max 240), ``float8_e4m3fn`` the OCP variant (no inf, max 448).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np


class DType(enum.IntEnum):
    float32 = 0
    bfloat16 = 1
    float16 = 2
    tfloat32 = 3  # 4-byte storage, 10-bit mantissa after rounding
    float8_e4m3 = 4
    float8_e5m2 = 5
    float8_e4m3fn = 6
    int8 = 7
    int16 = 8
    int32 = 9
    uint8 = 10
    uint16 = 11
    uint32 = 12
    bool_ = 13  # one byte, 0 or 1

    @property
    def itemsize(self) -> int:
        return _INFO[self].itemsize

    @property
    def numpy(self) -> np.dtype:
        """The numpy (or ml_dtypes) dtype holding this format on the host."""
        return _INFO[self].numpy

    @property
    def is_float(self) -> bool:
        return _INFO[self].is_float

    @property
    def is_int(self) -> bool:
        return not _INFO[self].is_float

    @property
    def is_16bit_float(self) -> bool:
        return self in (DType.bfloat16, DType.float16)

    @property
    def is_fp8(self) -> bool:
        return self in (DType.float8_e4m3, DType.float8_e5m2, DType.float8_e4m3fn)


@dataclass(frozen=True)
class _DTypeInfo:
    itemsize: int
    numpy: np.dtype
    is_float: bool


_INFO = {
    DType.float32: _DTypeInfo(4, np.dtype(np.float32), True),
    DType.bfloat16: _DTypeInfo(2, np.dtype(ml_dtypes.bfloat16), True),
    DType.float16: _DTypeInfo(2, np.dtype(np.float16), True),
    DType.tfloat32: _DTypeInfo(4, np.dtype(np.float32), True),
    DType.float8_e4m3: _DTypeInfo(1, np.dtype(ml_dtypes.float8_e4m3), True),
    DType.float8_e5m2: _DTypeInfo(1, np.dtype(ml_dtypes.float8_e5m2), True),
    DType.float8_e4m3fn: _DTypeInfo(1, np.dtype(ml_dtypes.float8_e4m3fn), True),
    DType.int8: _DTypeInfo(1, np.dtype(np.int8), False),
    DType.int16: _DTypeInfo(2, np.dtype(np.int16), False),
    DType.int32: _DTypeInfo(4, np.dtype(np.int32), False),
    DType.uint8: _DTypeInfo(1, np.dtype(np.uint8), False),
    DType.uint16: _DTypeInfo(2, np.dtype(np.uint16), False),
    DType.uint32: _DTypeInfo(4, np.dtype(np.uint32), False),
    DType.bool_: _DTypeInfo(1, np.dtype(np.bool_), False),
}

_FROM_NUMPY = {info.numpy: dt for dt, info in _INFO.items() if dt is not DType.tfloat32}


def dtype_of(x) -> DType:
    """A DType from a DType, its name, or a numpy/ml_dtypes dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        name = "bool_" if x in ("bool", "bool_") else x
        try:
            return DType[name]
        except KeyError:
            raise TypeError(f"unknown dtype name {x!r}; known: {[d.name for d in DType]}") from None
    try:
        return _FROM_NUMPY[np.dtype(x)]
    except (KeyError, TypeError):
        raise TypeError(f"dtype {x!r} is not stored by a NeuronCore; "
                        f"known: {[d.name for d in DType]}") from None
