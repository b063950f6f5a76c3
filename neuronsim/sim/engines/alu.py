"""The ALU operators shared by VectorE, ScalarE and GpSimd (``nki.language`` ops, S16-shared).

Arithmetic is fp32: each operator takes fp32 operands and returns an fp32 result rounded once.
Operators with no exact fp32 form (power, rsqrt) are computed in float64 and rounded to fp32, so
the Numba and numpy versions agree bit for bit. NaN in, NaN out for max/min. Comparisons and
logical operators return 1.0 or 0.0. Bit operators work on integers and wrap to the
destination's width, as an integer ALU does. GpSimd's native integer arithmetic (``native_int``)
computes the arithmetic and comparison operators exactly on int32/uint32 values, wrapped the same way.

Each operator has a Numba form (one element) and a numpy form (arrays, for the reference executor),
and the loops the elementwise families share run an operator over a buffer with the dispatch on the
operator outside the loop.
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

# Operators GpSimd computes natively on int32/uint32 tiles (tensor_tensor, S16).
NATIVE_INT_ALU_OPS = frozenset({
    AluOp.bypass, AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.maximum, AluOp.minimum,
    AluOp.abs_max, AluOp.abs_min, AluOp.equal, AluOp.not_equal, AluOp.greater, AluOp.greater_equal,
    AluOp.less, AluOp.less_equal, AluOp.logical_and, AluOp.logical_or, AluOp.logical_xor,
})
NATIVE_INT_DTYPES = frozenset({DType.int32, DType.uint32})

# How an elementwise instruction computes (an int immediate of its encoded row): fp32 ALU
# operators, bit operators on integers, or GpSimd's native integer arithmetic.
MODE_FLOAT, MODE_BITVEC, MODE_NATIVE_INT = 0, 1, 2


@njit(cache=True, inline="always")
def max_f32(a, b):
    """NaN-propagating fp32 maximum."""
    if a != a or b != b:
        return _F32_NAN
    return a if a >= b else b


@njit(cache=True, inline="always")
def min_f32(a, b):
    """NaN-propagating fp32 minimum."""
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
        return max_f32(a, b)
    if op == _MIN:
        return min_f32(a, b)
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
        return max_f32(abs(a), abs(b))
    if op == _AMIN:
        return min_f32(abs(a), abs(b))
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


# ---------------------------------------------------------------- loops (operator loop-invariant)
#
# Elementwise kernels stream a tile through cache-sized blocks of partitions (``access.block_rows``):
# read the block of each input into an fp32 (or int64) buffer, compute in place with these loops,
# write the block. Each loop runs one operator over the whole buffer, the dispatch on ``op`` outside
# the loop and the common operators as plain loops that LLVM vectorizes. Operand ranges of one
# partition count either coincide or are disjoint (the start partition rule), so block order is
# invisible and the result equals the reference's read-everything-then-write.

@njit(cache=True)
def combine_f32(op, x, y, reverse):
    """``x[j] = x[j] op y[j]`` (``y[j] op x[j]`` when reversed), fp32."""
    n = x.size
    if op == _ADD:
        for j in range(n):
            x[j] = x[j] + y[j]
    elif op == _MUL:
        for j in range(n):
            x[j] = x[j] * y[j]
    elif op == _SUB and not reverse:
        for j in range(n):
            x[j] = x[j] - y[j]
    elif reverse:
        for j in range(n):
            x[j] = alu_f32(op, y[j], x[j])
    else:
        for j in range(n):
            x[j] = alu_f32(op, x[j], y[j])


@njit(cache=True)
def apply_rows_f32(op, x, s, n, reverse):
    """``x[b, j] = x[b, j] op s[b]`` (``s[b] op x[b, j]`` when reversed) over rows of ``n``, fp32."""
    if op == _ADD:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] + sb
    elif op == _MUL:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] * sb
    elif op == _SUB and not reverse:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] - sb
    elif reverse:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = alu_f32(op, sb, x[j])
    else:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = alu_f32(op, x[j], sb)


@njit(cache=True, inline="always")
def bit_op(op, a, b, code):
    """A bit operator, or ``a`` unchanged for bypass (tensor_scalar's absent op1 slot)."""
    return a if op == _BYPASS else alu_int(op, a, b, code)


@njit(cache=True)
def combine_int(op, x, y, reverse, code):
    """``x[j] = x[j] op y[j]`` (``y[j] op x[j]`` when reversed), bit operators on integers."""
    if reverse:
        for j in range(x.size):
            x[j] = bit_op(op, y[j], x[j], code)
    else:
        for j in range(x.size):
            x[j] = bit_op(op, x[j], y[j], code)


@njit(cache=True)
def apply_rows_int(op, x, s, n, reverse, code):
    """``apply_rows_f32`` for bit operators on integers."""
    if reverse:
        for b in range(s.size):
            for j in range(b * n, (b + 1) * n):
                x[j] = bit_op(op, s[b], x[j], code)
    else:
        for b in range(s.size):
            for j in range(b * n, (b + 1) * n):
                x[j] = bit_op(op, x[j], s[b], code)


@njit(cache=True)
def native_int(op, a, b, code):
    """GpSimd's native integer ``a op b`` (NATIVE_INT_ALU_OPS), wrapped to the dtype ``code``."""
    if op == _ADD:
        r = a + b
    elif op == _SUB:
        r = a - b
    elif op == _MUL:
        r = a * b  # int64 wraparound keeps the low 32 bits exact
    elif op == _MAX:
        r = a if a >= b else b
    elif op == _MIN:
        r = a if a <= b else b
    elif op == _AMAX:
        r = max(abs(a), abs(b))
    elif op == _AMIN:
        r = min(abs(a), abs(b))
    elif op == _EQ:
        r = np.int64(a == b)
    elif op == _NE:
        r = np.int64(a != b)
    elif op == _GT:
        r = np.int64(a > b)
    elif op == _GE:
        r = np.int64(a >= b)
    elif op == _LT:
        r = np.int64(a < b)
    elif op == _LE:
        r = np.int64(a <= b)
    elif op == _LAND:
        r = np.int64(a != 0 and b != 0)
    elif op == _LOR:
        r = np.int64(a != 0 or b != 0)
    elif op == _LXOR:
        r = np.int64((a != 0) != (b != 0))
    else:  # bypass
        r = a
    return wrap_int(r, code)


@njit(cache=True)
def combine_native_int(op, x, y, code):
    """``x[j] = native_int(op, x[j], y[j])``."""
    for j in range(x.size):
        x[j] = native_int(op, x[j], y[j], code)


@njit(cache=True, inline="always")
def alu_step(op, x, s, reverse):
    """``x op s`` (``s op x`` reversed) in fp32; the common ops without the ALU dispatch."""
    if op == _ADD:
        return x + s
    if op == _MUL:
        return x * s
    if op == _SUB and not reverse:
        return x - s
    if op == _DIV:  # IEEE division is alu's divide (x / +-0 = +-inf, 0 / 0 = NaN), with no
        return np.true_divide(s, x) if reverse else np.true_divide(x, s)  # ZeroDivisionError branch
    return alu_f32(op, s, x) if reverse else alu_f32(op, x, s)


# ---------------------------------------------------------------- fold identities
#
# A fold (tensor_reduce, GpSimd tensor_partition_reduce) starts from its operator's identity.
F32_IDENTITY = {
    AluOp.add: -0.0,  # -0.0 + x == x for every x, including -0.0
    AluOp.multiply: 1.0,
    AluOp.maximum: -math.inf,
    AluOp.minimum: math.inf,
    AluOp.abs_max: 0.0,
    AluOp.abs_min: math.inf,
    AluOp.logical_and: 1.0,
    AluOp.logical_or: 0.0,
}
INT_IDENTITY = {AluOp.bitwise_and: -1, AluOp.bitwise_or: 0, AluOp.bitwise_xor: 0}


@njit(cache=True)
def identity_f32(op):
    """The value a fold over ``op`` starts from, so one element folds to ``op(identity, x)``."""
    if op == _ADD:
        return np.float32(-0.0)
    if op == _MUL or op == _LAND:
        return np.float32(1.0)
    if op == _MAX:
        return np.float32(-np.inf)
    if op == _MIN or op == _AMIN:
        return np.float32(np.inf)
    return np.float32(0.0)  # abs_max, logical_or


@njit(cache=True)
def identity_int(op):
    if op == _BAND:
        return np.int64(-1)
    return np.int64(0)


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


def native_int_np(op: AluOp, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Reference of :func:`native_int` on int64 arrays."""
    op = AluOp(op)
    with np.errstate(over="ignore"):
        table = {
            AluOp.add: lambda: a + b,
            AluOp.subtract: lambda: a - b,
            AluOp.multiply: lambda: a * b,
            AluOp.maximum: lambda: np.maximum(a, b),
            AluOp.minimum: lambda: np.minimum(a, b),
            AluOp.abs_max: lambda: np.maximum(np.abs(a), np.abs(b)),
            AluOp.abs_min: lambda: np.minimum(np.abs(a), np.abs(b)),
            AluOp.equal: lambda: (a == b).astype(np.int64),
            AluOp.not_equal: lambda: (a != b).astype(np.int64),
            AluOp.greater: lambda: (a > b).astype(np.int64),
            AluOp.greater_equal: lambda: (a >= b).astype(np.int64),
            AluOp.less: lambda: (a < b).astype(np.int64),
            AluOp.less_equal: lambda: (a <= b).astype(np.int64),
            AluOp.logical_and: lambda: ((a != 0) & (b != 0)).astype(np.int64),
            AluOp.logical_or: lambda: ((a != 0) | (b != 0)).astype(np.int64),
            AluOp.logical_xor: lambda: ((a != 0) != (b != 0)).astype(np.int64),
            AluOp.bypass: lambda: a,
        }
        return wrap_int_np(np.asarray(table[op](), dtype=np.int64), dtype)


def bit_op_np(op: AluOp, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    return np.asarray(a, dtype=np.int64) if op is AluOp.bypass else alu_int_np(op, a, b, dtype)
