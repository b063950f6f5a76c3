"""The ALU operators shared by VectorE, ScalarE and GpSimd (``nki.language`` ops, S16-shared).

Arithmetic is fp32: each operator takes fp32 operands and returns an fp32 result rounded once.
Operators with no exact fp32 form (power, rsqrt) are computed in float64 and rounded to fp32, so
the Numba and numpy versions agree bit for bit. NaN in, NaN out for max/min. Comparisons and
logical operators return 1.0 or 0.0. Bit operators work on integers and wrap to the
destination's width, as an integer ALU does.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AluOp

_ADD, _SUB, _MUL, _DIV = int(AluOp.add), int(AluOp.subtract), int(AluOp.multiply), int(AluOp.divide)
_MAX, _MIN, _POW = int(AluOp.maximum), int(AluOp.minimum), int(AluOp.power)
_EQ, _NE, _GT, _GE, _LT, _LE = (int(AluOp.equal), int(AluOp.not_equal), int(AluOp.greater),
                                int(AluOp.greater_equal), int(AluOp.less), int(AluOp.less_equal))
_LAND, _LOR, _LXOR = int(AluOp.logical_and), int(AluOp.logical_or), int(AluOp.logical_xor)
_AMAX, _AMIN, _BYPASS = int(AluOp.abs_max), int(AluOp.abs_min), int(AluOp.bypass)
_ABS, _SQUARE, _RELU, _RSQRT, _RECIP = (int(AluOp.abs), int(AluOp.square), int(AluOp.relu),
                                        int(AluOp.rsqrt), int(AluOp.reciprocal))
_MOD = int(AluOp.mod)
_BAND, _BOR, _BXOR = int(AluOp.bitwise_and), int(AluOp.bitwise_or), int(AluOp.bitwise_xor)
_SHL, _SHR, _INV = int(AluOp.left_shift), int(AluOp.right_shift), int(AluOp.invert)

_F32_NAN = np.float32(np.nan)


@njit(cache=True, inline="always")
def _max(a, b):
    if a != a or b != b:
        return _F32_NAN
    return a if a >= b else b


@njit(cache=True, inline="always")
def _min(a, b):
    if a != a or b != b:
        return _F32_NAN
    return a if a <= b else b


@njit(cache=True, inline="always")
def _div(a, b):
    if b == 0:
        if a != a or a == 0:
            return _F32_NAN
        return np.float32(np.inf) if (a > 0) == (math.copysign(1.0, b) > 0) else np.float32(-np.inf)
    return np.float32(a / b)


@njit(cache=True)
def alu_f32(op, a, b):
    """``a op b`` for fp32 ``a``, ``b`` (unary operators ignore ``b``)."""
    one = np.float32(1.0)
    zero = np.float32(0.0)
    if op == _ADD:
        return np.float32(a + b)
    if op == _SUB:
        return np.float32(a - b)
    if op == _MUL:
        return np.float32(a * b)
    if op == _DIV:
        return _div(a, b)
    if op == _MAX:
        return _max(a, b)
    if op == _MIN:
        return _min(a, b)
    if op == _BYPASS:
        return a
    if op == _POW:
        return np.float32(_pow64(np.float64(a), np.float64(b)))
    if op == _EQ:
        return one if a == b else zero
    if op == _NE:
        return one if a != b else zero
    if op == _GT:
        return one if a > b else zero
    if op == _GE:
        return one if a >= b else zero
    if op == _LT:
        return one if a < b else zero
    if op == _LE:
        return one if a <= b else zero
    if op == _LAND:
        return one if (a != 0 and b != 0) else zero
    if op == _LOR:
        return one if (a != 0 or b != 0) else zero
    if op == _LXOR:
        return one if ((a != 0) != (b != 0)) else zero
    if op == _AMAX:
        return _max(abs(a), abs(b))
    if op == _AMIN:
        return _min(abs(a), abs(b))
    if op == _ABS:
        return abs(a)
    if op == _SQUARE:
        return np.float32(a * a)
    if op == _RELU:
        if a != a:
            return a
        return a if a > 0 else zero
    if op == _RSQRT:
        return np.float32(_rsqrt64(np.float64(a)))
    if op == _RECIP:
        return _div(one, a)
    if op == _MOD:
        return np.float32(_fmod64(np.float64(a), np.float64(b)))
    return _F32_NAN


@njit(cache=True, inline="always")
def _pow64(a, b):
    if a < 0 and b != math.floor(b):
        return np.nan
    if a == 0 and b < 0:
        return np.inf
    return a ** b


@njit(cache=True, inline="always")
def _rsqrt64(a):
    if a < 0 or a != a:
        return np.nan
    if a == 0:
        return np.inf
    return 1.0 / math.sqrt(a)


@njit(cache=True, inline="always")
def _fmod64(a, b):
    if b == 0 or a != a or b != b or math.isinf(a):
        return np.nan
    return np.fmod(a, b)  # numba has no math.fmod


_BITS = np.array([0] * len(DType), dtype=np.int64)
_SIGNED = np.array([False] * len(DType), dtype=np.bool_)
for _dt in DType:
    if _dt.is_int:
        _BITS[int(_dt)] = 1 if _dt is DType.bool_ else 8 * _dt.itemsize
        _SIGNED[int(_dt)] = _dt in (DType.int8, DType.int16, DType.int32)


@njit(cache=True, inline="always")
def wrap_int(v, code):
    """Two's-complement wrap of ``v`` to the integer dtype ``code``."""
    bits = _BITS[code]
    mask = (np.int64(1) << bits) - 1
    v = v & mask
    if _SIGNED[code] and v >= (np.int64(1) << (bits - 1)):
        v -= np.int64(1) << bits
    return v


@njit(cache=True)
def alu_int(op, a, b, code):
    """Bit operator ``a op b`` on integers, wrapped to the dtype ``code``."""
    if op == _BAND:
        r = a & b
    elif op == _BOR:
        r = a | b
    elif op == _BXOR:
        r = a ^ b
    elif op == _SHL:
        r = a << (b & 63)
    elif op == _SHR:
        r = a >> (b & 63)
    elif op == _INV:
        r = ~a
    else:
        r = 0
    return wrap_int(r, code)


# ---------------------------------------------------------------- numpy reference

def _where_nan(a, b, r):
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), r).astype(np.float32)


def _np_div(a, b):
    with np.errstate(all="ignore"):
        return np.divide(a, b).astype(np.float32)


def _np_pow(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        r = np.power(a64, b64)
    r = np.where((a64 < 0) & (b64 != np.floor(b64)), np.nan, r)
    r = np.where((a64 == 0) & (b64 < 0), np.inf, r)
    return r.astype(np.float32)


def _np_rsqrt(a):
    a64 = a.astype(np.float64)
    with np.errstate(all="ignore"):
        r = 1.0 / np.sqrt(a64)
    r = np.where(a64 == 0, np.inf, r)
    return np.where((a64 < 0) | np.isnan(a64), np.nan, r).astype(np.float32)


def _np_mod(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        r = np.fmod(a64, b64)
    return np.where((b64 == 0) | np.isnan(a64) | np.isnan(b64) | np.isinf(a64), np.nan, r).astype(np.float32)


def _flag(x):
    return x.astype(np.float32)


_NP_FLOAT_OPS = {
    AluOp.add: lambda a, b: a + b,
    AluOp.subtract: lambda a, b: a - b,
    AluOp.multiply: lambda a, b: a * b,
    AluOp.divide: _np_div,
    AluOp.maximum: lambda a, b: _where_nan(a, b, np.where(a >= b, a, b)),
    AluOp.minimum: lambda a, b: _where_nan(a, b, np.where(a <= b, a, b)),
    AluOp.bypass: lambda a, b: a,
    AluOp.power: _np_pow,
    AluOp.equal: lambda a, b: _flag(a == b),
    AluOp.not_equal: lambda a, b: _flag(a != b),
    AluOp.greater: lambda a, b: _flag(a > b),
    AluOp.greater_equal: lambda a, b: _flag(a >= b),
    AluOp.less: lambda a, b: _flag(a < b),
    AluOp.less_equal: lambda a, b: _flag(a <= b),
    AluOp.logical_and: lambda a, b: _flag((a != 0) & (b != 0)),
    AluOp.logical_or: lambda a, b: _flag((a != 0) | (b != 0)),
    AluOp.logical_xor: lambda a, b: _flag((a != 0) != (b != 0)),
    AluOp.abs_max: lambda a, b: _where_nan(a, b, np.where(np.abs(a) >= np.abs(b), np.abs(a), np.abs(b))),
    AluOp.abs_min: lambda a, b: _where_nan(a, b, np.where(np.abs(a) <= np.abs(b), np.abs(a), np.abs(b))),
    AluOp.abs: lambda a, b: np.abs(a),
    AluOp.square: lambda a, b: a * a,
    AluOp.relu: lambda a, b: np.where(np.isnan(a) | (a > 0), a, np.float32(0)),
    AluOp.rsqrt: lambda a, b: _np_rsqrt(a),
    AluOp.reciprocal: lambda a, b: _np_div(np.ones_like(a), a),
    AluOp.mod: _np_mod,
}


def alu_np(op: AluOp, a: np.ndarray, b) -> np.ndarray:
    """Reference of :func:`alu_f32` on float32 arrays (``b`` broadcasts)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.broadcast_to(np.asarray(b, dtype=np.float32), a.shape)
    with np.errstate(all="ignore"):
        return np.asarray(_NP_FLOAT_OPS[AluOp(op)](a, b), dtype=np.float32)


def wrap_int_np(v: np.ndarray, dtype: DType) -> np.ndarray:
    bits = 1 if dtype is DType.bool_ else 8 * dtype.itemsize
    v = v & ((1 << bits) - 1)
    if dtype in (DType.int8, DType.int16, DType.int32):
        v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    return v


def alu_int_np(op: AluOp, a: np.ndarray, b, dtype: DType) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    b = np.broadcast_to(np.asarray(b, dtype=np.int64), a.shape)
    op = AluOp(op)
    if op is AluOp.bitwise_and:
        r = a & b
    elif op is AluOp.bitwise_or:
        r = a | b
    elif op is AluOp.bitwise_xor:
        r = a ^ b
    elif op is AluOp.left_shift:
        r = a << (b & 63)
    elif op is AluOp.right_shift:
        r = a >> (b & 63)
    elif op is AluOp.invert:
        r = ~a
    else:
        raise ValueError(op)
    return wrap_int_np(r, dtype)
