"""How each storage dtype is read into and written from fp32: the one definition of it.

Engines compute in fp32; memory holds raw bytes in a ``DType`` format. Two implementations
of the same rules live here and must agree bit for bit:

- Numba, for the Numba executor: ``load_f32`` / ``store_f32`` (values) and ``load_i64`` /
  ``store_i64`` (integer bits, for bitvec ALU ops), each taking an int64 byte address and a
  ``DType`` code, called from the executor's one big ``@njit`` function.
- numpy, for the reference executor, written for clarity: ``decode`` / ``encode`` and
  ``decode_int`` / ``encode_int``, on arrays viewed as ``DType(code).numpy``.

The rules:

- Loads are exact (int32/uint32 to fp32 round to nearest even, as any int->float conversion).
  bool reads 1.0 for any nonzero byte. tfloat32 reads as the fp32 it is stored as.
- Every NaN, loaded or stored, is its format's canonical quiet NaN with the sign clear
  (``CANONICAL_NAN_BITS``). NaN payloads depend on how a computation was compiled, so they
  are the one thing the two executors could not otherwise agree on; canonicalizing on both
  sides of memory removes them from the picture.
- Float stores round to nearest even, subnormals included. Overflow is ml_dtypes': fp16,
  bf16, tfloat32, float8_e4m3 and float8_e5m2 go to +-inf, float8_e4m3fn (no inf) to NaN
  (canonical, so -500 -> 0x7F where ml_dtypes gives 0xFF). tfloat32 is fp32 with the low 13
  mantissa bits rounded away, stored in 4 bytes.
- Float -> int stores round to nearest even, saturate to the type's range, NaN -> 0.
  Float -> bool: 0.0 and -0.0 -> 0, anything else (NaN included) -> 1.
- Integer stores (``store_i64``) saturate to the type's range rather than wrap; bool stores
  ``value != 0``. On float dtypes ``load_i64`` / ``store_i64`` move the raw bit pattern
  (zero-extended / low bytes), which bitcasts need and which the validator otherwise keeps
  away from bitvec ops.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from neuronsim.sim.dtypes import DType

# Canonical quiet NaN of each float format, positive: what np.nan converts to (ml_dtypes/numpy).
CANONICAL_NAN_BITS = {
    DType.float32: 0x7FC00000,
    DType.tfloat32: 0x7FC00000,
    DType.bfloat16: 0x7FC0,
    DType.float16: 0x7E00,
    DType.float8_e4m3: 0x7C,
    DType.float8_e5m2: 0x7E,
    DType.float8_e4m3fn: 0x7F,
}

# Saturation bounds of the integer dtypes (bool is handled as "nonzero").
INT_RANGE = {
    DType.int8: (-(2**7), 2**7 - 1),
    DType.int16: (-(2**15), 2**15 - 1),
    DType.int32: (-(2**31), 2**31 - 1),
    DType.uint8: (0, 2**8 - 1),
    DType.uint16: (0, 2**16 - 1),
    DType.uint32: (0, 2**32 - 1),
}

_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32}

# Integer codes as plain ints: Numba freezes globals, so these fold into constants.
_F32, _BF16, _F16, _TF32 = int(DType.float32), int(DType.bfloat16), int(DType.float16), int(DType.tfloat32)
_E4M3, _E5M2, _E4M3FN = int(DType.float8_e4m3), int(DType.float8_e5m2), int(DType.float8_e4m3fn)
_I8, _I16, _I32 = int(DType.int8), int(DType.int16), int(DType.int32)
_U8, _U16, _U32, _BOOL = int(DType.uint8), int(DType.uint16), int(DType.uint32), int(DType.bool_)
_NAN32 = CANONICAL_NAN_BITS[DType.float32]


# ---------------------------------------------------------------------------------------------
# Raw memory intrinsics. Addresses are byte addresses (int64); accesses are unaligned-safe
# (align=1) because element offsets into a buffer need not be multiples of the itemsize.


def _load_intrinsic(name: str, nbtype, llvm_type):
    def load(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            address = context.cast(builder, args[0], signature.args[0], types.int64)
            return builder.load(builder.inttoptr(address, llvm_type.as_pointer()), align=1)

        return nbtype(addr), codegen

    load.__name__ = load.__qualname__ = name
    return intrinsic(load)


def _store_intrinsic(name: str, nbtype, llvm_type):
    def store(typingctx, addr, value):
        if not isinstance(addr, types.Integer) or not isinstance(value, (types.Integer, types.Float)):
            return None

        def codegen(context, builder, signature, args):
            address = context.cast(builder, args[0], signature.args[0], types.int64)
            stored = context.cast(builder, args[1], signature.args[1], nbtype)
            builder.store(stored, builder.inttoptr(address, llvm_type.as_pointer()), align=1)
            return context.get_dummy_value()

        return types.void(addr, value), codegen

    store.__name__ = store.__qualname__ = name
    return intrinsic(store)


load_u8 = _load_intrinsic("load_u8", types.uint8, ir.IntType(8))
load_u16 = _load_intrinsic("load_u16", types.uint16, ir.IntType(16))
load_u32 = _load_intrinsic("load_u32", types.uint32, ir.IntType(32))
load_raw_f32 = _load_intrinsic("load_raw_f32", types.float32, ir.FloatType())
store_u8 = _store_intrinsic("store_u8", types.uint8, ir.IntType(8))
store_u16 = _store_intrinsic("store_u16", types.uint16, ir.IntType(16))
store_u32 = _store_intrinsic("store_u32", types.uint32, ir.IntType(32))
store_raw_f32 = _store_intrinsic("store_raw_f32", types.float32, ir.FloatType())


def _from_bits_intrinsic(name: str, int_type, float_type, llvm_type):
    """Reinterpret an integer (cast to ``int_type``, truncated or widened) as ``float_type``."""
    def from_bits(typingctx, bits):
        if not isinstance(bits, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            as_int = context.cast(builder, args[0], signature.args[0], int_type)
            return builder.bitcast(as_int, llvm_type)

        return float_type(bits), codegen

    from_bits.__name__ = from_bits.__qualname__ = name
    return intrinsic(from_bits)


f32_from_bits = _from_bits_intrinsic("f32_from_bits", types.uint32, types.float32, ir.FloatType())
f64_from_bits = _from_bits_intrinsic("f64_from_bits", types.int64, types.float64, ir.DoubleType())


@intrinsic
def bits_from_f32(typingctx, value):
    """Reinterpret a float32 as uint32."""
    if not isinstance(value, types.Float):
        return None

    def codegen(context, builder, signature, args):
        as_f32 = context.cast(builder, args[0], signature.args[0], types.float32)
        return builder.bitcast(as_f32, ir.IntType(32))

    return types.uint32(value), codegen


# ---------------------------------------------------------------------------------------------
# fp8 decode tables, built from the format definitions (not from ml_dtypes, so that the tests
# comparing against ml_dtypes check something). Numba freezes these arrays into the code.


def _fp8_decode_table(man_bits: int, bias: int, has_inf: bool) -> np.ndarray:
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp_max = (1 << (7 - man_bits)) - 1
    exp = (codes >> man_bits) & exp_max
    man = codes & ((1 << man_bits) - 1)
    subnormal = np.ldexp(man.astype(np.float64), 1 - bias - man_bits)
    normal = np.ldexp((man + (1 << man_bits)).astype(np.float64), exp - bias - man_bits)
    values = sign * np.where(exp == 0, subnormal, normal)
    if has_inf:  # IEEE style: top exponent is inf (mantissa 0) or NaN
        values = np.where((exp == exp_max) & (man == 0), sign * np.inf, values)
        values = np.where((exp == exp_max) & (man != 0), np.nan, values)
    else:  # "fn": no inf, only the all-ones pattern is NaN
        values = np.where((codes & 0x7F) == 0x7F, np.nan, values)
    table = values.astype(np.float32)
    table.flags.writeable = False
    return table


_E4M3_TABLE = _fp8_decode_table(man_bits=3, bias=7, has_inf=True)
_E5M2_TABLE = _fp8_decode_table(man_bits=2, bias=15, has_inf=True)
_E4M3FN_TABLE = _fp8_decode_table(man_bits=3, bias=7, has_inf=False)


# ---------------------------------------------------------------------------------------------
# Numba decoders and encoders (one element, bit manipulation, no allocation).


@njit(cache=True, inline="always")
def canonical_f32(value):
    """``value``, or fp32's canonical NaN if it is a NaN."""
    return f32_from_bits(_NAN32) if value != value else value


@njit(cache=True, inline="always")
def canonical_f32_bits(value):
    """The bits an fp32 store writes for ``value``: its own, or the canonical NaN's."""
    return bits_from_f32(value) if value == value else np.uint32(_NAN32)


@njit(cache=True, inline="always")
def _decode_bf16(h):
    return canonical_f32(f32_from_bits(np.uint32(h) << np.uint32(16)))


@njit(cache=True, inline="always")
def _decode_f16(h):
    h = np.int64(h)
    sign = (h & 0x8000) << 16
    exp = (h >> 10) & 0x1F
    man = h & 0x3FF
    if exp == 0x1F:
        return f32_from_bits(_NAN32) if man else f32_from_bits(sign | 0x7F800000)
    if exp:  # normal: rebias 15 -> 127 and widen the mantissa
        return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13))
    # zero or subnormal: man * 2^-24 is exact in fp32
    magnitude = np.float32(man) * np.float32(2.0**-24)
    return f32_from_bits(sign | np.int64(bits_from_f32(magnitude)))


@njit(cache=True, inline="always")
def _encode_bf16(value):
    bits = np.int64(bits_from_f32(value))
    if value != value:
        return 0x7FC0
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest even; a carry into the
    # exponent is the correct rounding up (to the next binade, or to inf).
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


@njit(cache=True, inline="always")
def _encode_tf32(value):
    if value != value:
        return _NAN32
    bits = np.int64(bits_from_f32(value))
    return (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000


@njit(cache=True, inline="always")
def _encode_narrow_float(value, total_bits, man_bits, bias, max_finite, overflow, nan_code):
    """Round an fp32 to nearest even in a narrower IEEE-like format and return its code.

    ``max_finite`` is the largest finite magnitude code; a magnitude rounding above it
    becomes ``overflow`` (the inf code, keeping the sign) or NaN if ``overflow == nan_code``.
    """
    if value != value:
        return nan_code
    bits = np.int64(bits_from_f32(value))
    sign = (bits >> 31) << (total_bits - 1)
    magnitude = bits & 0x7FFFFFFF
    if (magnitude >> 23) >= 128 - bias:
        # Normal in the target: rebias the exponent, then round the mantissa at its new width.
        shift = 23 - man_bits
        rebiased = magnitude - ((127 - bias) << 23)
        code = (rebiased + (1 << (shift - 1)) - 1 + ((rebiased >> shift) & 1)) >> shift
    else:
        # Subnormal (or zero) in the target: count units of its fixed spacing 2^(1-bias-man).
        # The scaling is by a power of two, hence exact; rint rounds to nearest even. A result
        # of 2^man_bits is the smallest normal, whose code is that same number.
        scaled = np.float64(abs(value)) * 2.0 ** (bias + man_bits - 1)
        code = np.int64(np.rint(scaled))
    if code > max_finite:
        if overflow == nan_code:
            return nan_code
        code = overflow
    return sign | code


@njit(cache=True, inline="always")
def _encode_f16(value):
    return _encode_narrow_float(value, 16, 10, 15, 0x7BFF, 0x7C00, 0x7E00)


@njit(cache=True, inline="always")
def _encode_e4m3(value):
    return _encode_narrow_float(value, 8, 3, 7, 0x77, 0x78, 0x7C)


@njit(cache=True, inline="always")
def _encode_e5m2(value):
    return _encode_narrow_float(value, 8, 2, 15, 0x7B, 0x7C, 0x7E)


@njit(cache=True, inline="always")
def _encode_e4m3fn(value):
    return _encode_narrow_float(value, 8, 3, 7, 0x7E, 0x7F, 0x7F)


@njit(cache=True, inline="always")
def _int_range(code):
    if code == _I8:
        return -128, 127
    if code == _I16:
        return -32768, 32767
    if code == _I32:
        return -2147483648, 2147483647
    if code == _U8:
        return 0, 255
    if code == _U16:
        return 0, 65535
    return 0, 4294967295  # _U32


@njit(cache=True, inline="always")
def _f32_to_int(value, code):
    """Round to nearest even and saturate; NaN -> 0. (fp32 -> fp64 is exact, and rint of an fp32
    value is the same in fp64, so the fp64 bounds compare exactly.)"""
    if value != value:
        return np.int64(0)
    lo, hi = _int_range(code)
    rounded = min(max(np.rint(np.float64(value)), np.float64(lo)), np.float64(hi))
    return np.int64(rounded)


@njit(cache=True, inline="always")
def _store_int_bits(addr, code, value):
    """Write the low bytes of an int64 already in range for ``code``."""
    if code == _I8 or code == _U8 or code == _BOOL:
        store_u8(addr, np.uint8(value & 0xFF))
    elif code == _I16 or code == _U16:
        store_u16(addr, np.uint16(value & 0xFFFF))
    else:
        store_u32(addr, np.uint32(value & 0xFFFFFFFF))


# ---------------------------------------------------------------------------------------------
# The Numba surface. Not inline="always": Numba's IR-level inlining copies the whole dispatch
# into every call site, and an executor with dozens of sites then takes minutes (or all memory)
# to compile. LLVM still inlines them where it pays, and folds the dispatch when `code` is a
# compile-time constant.


@njit(cache=True)
def load_f32(addr, code):
    """The element of dtype ``code`` at byte address ``addr``, as fp32 (see module rules)."""
    if code == _F32 or code == _TF32:
        return canonical_f32(load_raw_f32(addr))
    if code == _BF16:
        return _decode_bf16(load_u16(addr))
    if code == _F16:
        return _decode_f16(load_u16(addr))
    if code == _E4M3:
        return _E4M3_TABLE[load_u8(addr)]
    if code == _E5M2:
        return _E5M2_TABLE[load_u8(addr)]
    if code == _E4M3FN:
        return _E4M3FN_TABLE[load_u8(addr)]
    if code == _BOOL:
        return np.float32(1.0) if load_u8(addr) else np.float32(0.0)
    return np.float32(load_i64(addr, code))


@njit(cache=True)
def store_f32(addr, code, value):
    """Encode ``value`` (rounded to fp32 first if wider) as dtype ``code`` at ``addr``."""
    v = np.float32(value)
    if code == _F32:
        store_u32(addr, np.uint32(_NAN32) if v != v else bits_from_f32(v))
    elif code == _BF16:
        store_u16(addr, np.uint16(_encode_bf16(v)))
    elif code == _F16:
        store_u16(addr, np.uint16(_encode_f16(v)))
    elif code == _TF32:
        store_u32(addr, np.uint32(_encode_tf32(v)))
    elif code == _E4M3:
        store_u8(addr, np.uint8(_encode_e4m3(v)))
    elif code == _E5M2:
        store_u8(addr, np.uint8(_encode_e5m2(v)))
    elif code == _E4M3FN:
        store_u8(addr, np.uint8(_encode_e4m3fn(v)))
    elif code == _BOOL:
        store_u8(addr, np.uint8(0 if v == 0 else 1))
    else:
        _store_int_bits(addr, code, _f32_to_int(v, code))


@njit(cache=True)
def load_i64(addr, code):
    """The integer at ``addr``: signed/unsigned value of an int dtype, 0/1 for bool (any nonzero
    byte is 1), the zero-extended raw bits for a float dtype."""
    if code == _I8:
        return np.int64(np.int8(load_u8(addr)))
    if code == _I16:
        return np.int64(np.int16(load_u16(addr)))
    if code == _I32:
        return np.int64(np.int32(load_u32(addr)))
    if code == _BOOL:
        return np.int64(1) if load_u8(addr) else np.int64(0)
    if code == _U8 or code == _E4M3 or code == _E5M2 or code == _E4M3FN:
        return np.int64(load_u8(addr))
    if code == _U16 or code == _BF16 or code == _F16:
        return np.int64(load_u16(addr))
    return np.int64(load_u32(addr))  # uint32, float32, tfloat32


@njit(cache=True)
def store_i64(addr, code, value):
    """Store an integer: saturated to an int dtype's range (no wraparound), ``value != 0`` for
    bool, the low bytes (raw bits) for a float dtype."""
    v = np.int64(value)
    if code == _BOOL:
        store_u8(addr, np.uint8(1 if v != 0 else 0))
    elif code == _BF16 or code == _F16:
        store_u16(addr, np.uint16(v & 0xFFFF))
    elif code == _E4M3 or code == _E5M2 or code == _E4M3FN:
        store_u8(addr, np.uint8(v & 0xFF))
    elif code == _F32 or code == _TF32:
        store_u32(addr, np.uint32(v & 0xFFFFFFFF))
    else:
        lo, hi = _int_range(code)
        _store_int_bits(addr, code, min(max(v, np.int64(lo)), np.int64(hi)))


# ---------------------------------------------------------------------------------------------
# The numpy reference (the reference executor's definition of the same rules).


def _check_raw(raw: np.ndarray, dtype: DType) -> None:
    if raw.dtype != dtype.numpy:
        raise TypeError(f"{dtype.name} data must be viewed as {dtype.numpy}, got {raw.dtype}")


def _bits_view(values: np.ndarray) -> np.ndarray:
    return values.view(_UINT_OF_SIZE[values.dtype.itemsize])


def canonicalize_nan(values: np.ndarray) -> np.ndarray:
    """A copy of a float array (fp32, bf16, fp16 or fp8) with every NaN made the canonical one."""
    out = np.array(values, copy=True)
    _bits_view(out)[np.isnan(out)] = _nan_bits_of(out.dtype)
    return out


def _nan_bits_of(np_dtype: np.dtype) -> int:
    for dtype, bits in CANONICAL_NAN_BITS.items():
        if dtype.numpy == np_dtype:
            return bits
    raise TypeError(f"{np_dtype} is not a float storage format")


def decode(raw: np.ndarray, code) -> np.ndarray:
    """fp32 values of ``raw`` (viewed as ``DType(code).numpy``); same rules as ``load_f32``."""
    dtype = DType(code)
    _check_raw(raw, dtype)
    if dtype is DType.bool_:
        return (raw.view(np.uint8) != 0).astype(np.float32)
    with np.errstate(invalid="ignore"):  # signaling NaNs raise "invalid" when widened
        values = raw.astype(np.float32)
    return canonicalize_nan(values) if dtype.is_float else values


def encode(values: np.ndarray, code) -> np.ndarray:
    """fp32 ``values`` stored as ``DType(code).numpy``; same rules as ``store_f32``."""
    dtype = DType(code)
    values = np.asarray(values, dtype=np.float32)
    if dtype is DType.bool_:
        return values != 0
    if dtype.is_int:
        return _round_to_int(values, dtype)
    if dtype is DType.tfloat32:
        return _round_to_tf32(values)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the rule
        return canonicalize_nan(values.astype(dtype.numpy))


def _round_to_tf32(values: np.ndarray) -> np.ndarray:
    # Not in ml_dtypes: round the fp32 bits at mantissa bit 13, nearest even (carry = round up).
    bits = _bits_view(values).astype(np.uint64)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    out = rounded.astype(np.uint32).view(np.float32)
    return canonicalize_nan(np.where(np.isnan(values), np.float32(np.nan), out))


def _round_to_int(values: np.ndarray, dtype: DType) -> np.ndarray:
    lo, hi = INT_RANGE[dtype]
    with np.errstate(invalid="ignore"):  # signaling NaNs raise "invalid" when widened
        rounded = np.clip(np.rint(values.astype(np.float64)), lo, hi)
    return np.where(np.isnan(rounded), 0, rounded).astype(np.int64).astype(dtype.numpy)


def decode_int(raw: np.ndarray, code) -> np.ndarray:
    """int64 values of ``raw`` (viewed as ``DType(code).numpy``); same rules as ``load_i64``."""
    dtype = DType(code)
    _check_raw(raw, dtype)
    if dtype is DType.bool_:
        return (raw.view(np.uint8) != 0).astype(np.int64)
    if dtype.is_float:
        return _bits_view(raw).astype(np.int64)
    return raw.astype(np.int64)


def encode_int(values: np.ndarray, code) -> np.ndarray:
    """int64 ``values`` stored as ``DType(code).numpy``; same rules as ``store_i64``."""
    dtype = DType(code)
    values = np.asarray(values, dtype=np.int64)
    if dtype is DType.bool_:
        return values != 0
    if dtype.is_float:
        uint = _UINT_OF_SIZE[dtype.itemsize]
        return (values & np.iinfo(uint).max).astype(uint).view(dtype.numpy)
    lo, hi = INT_RANGE[dtype]
    return np.clip(values, lo, hi).astype(dtype.numpy)
