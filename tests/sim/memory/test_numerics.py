"""Storage numerics: the Numba element accessors and the numpy reference agree bit for bit, and
both follow ml_dtypes/numpy (or an independent oracle where those have no say)."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from neuronsim.sim.dtypes import DType
from neuronsim.sim.memory import numerics as nm

FLOATS = [d for d in DType if d.is_float]
NARROW_FLOATS = [DType.bfloat16, DType.float16, DType.float8_e4m3, DType.float8_e5m2, DType.float8_e4m3fn]
INTS = [d for d in DType if d.is_int and d is not DType.bool_]
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32}

NAN_PAYLOADS = np.array(
    [0x7F800001, 0x7FBFFFFF, 0x7FC00001, 0x7FFFFFFF, 0x7F802000, 0xFFC00000, 0xFF800001, 0xFFFFFFFF],
    dtype=np.uint32,
).view(np.float32)


# --- Numba drivers: loop over numpy buffers by raw byte address, as the executor does. -----------


@njit
def _store_all(src, dst, n, itemsize, code):
    for i in range(n):
        nm.store_f32(dst + i * itemsize, code, nm.load_raw_f32(src + 4 * i))


@njit
def _load_all(src, dst, n, itemsize, code):
    for i in range(n):
        nm.store_u32(dst + 4 * i, nm.bits_from_f32(nm.load_f32(src + i * itemsize, code)))


@njit
def _store_all_int(src, dst, n, itemsize, code):
    for i in range(n):
        value = np.int64(nm.load_u32(src + 8 * i)) | (np.int64(nm.load_u32(src + 8 * i + 4)) << 32)
        nm.store_i64(dst + i * itemsize, code, value)


@njit
def _load_all_int(src, dst, n, itemsize, code):
    for i in range(n):
        value = nm.load_i64(src + i * itemsize, code)
        nm.store_u32(dst + 8 * i, np.uint32(value & 0xFFFFFFFF))
        nm.store_u32(dst + 8 * i + 4, np.uint32((value >> 32) & 0xFFFFFFFF))


def numba_store(values: np.ndarray, dtype: DType, offset: int = 0) -> np.ndarray:
    """store_f32 of every value into a fresh buffer, starting ``offset`` bytes in."""
    src = np.ascontiguousarray(values, dtype=np.float32)
    buf = np.zeros(len(src) * dtype.itemsize + offset, np.uint8)
    _store_all(src.ctypes.data, buf.ctypes.data + offset, len(src), dtype.itemsize, int(dtype))
    return buf[offset:].view(dtype.numpy)


def numba_load(raw: np.ndarray, dtype: DType, offset: int = 0) -> np.ndarray:
    """load_f32 of every element of ``raw``, read from a buffer ``offset`` bytes in."""
    buf = np.zeros(raw.nbytes + offset, np.uint8)
    buf[offset:] = np.ascontiguousarray(raw).view(np.uint8)
    out = np.zeros(len(raw), np.float32)
    _load_all(buf.ctypes.data + offset, out.ctypes.data, len(raw), dtype.itemsize, int(dtype))
    return out


def numba_store_int(values: np.ndarray, dtype: DType) -> np.ndarray:
    src = np.ascontiguousarray(values, dtype=np.int64)
    out = np.zeros(len(src), dtype.numpy)
    _store_all_int(src.ctypes.data, out.ctypes.data, len(src), dtype.itemsize, int(dtype))
    return out


def numba_load_int(raw: np.ndarray, dtype: DType) -> np.ndarray:
    raw = np.ascontiguousarray(raw)
    out = np.zeros(len(raw), np.int64)
    _load_all_int(raw.ctypes.data, out.ctypes.data, len(raw), dtype.itemsize, int(dtype))
    return out


# --- Helpers -------------------------------------------------------------------------------------


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(UINT_OF_SIZE[a.dtype.itemsize])


def assert_same_bits(actual: np.ndarray, expected: np.ndarray, inputs: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    bad = np.flatnonzero(bits(actual) != bits(expected))
    if bad.size:
        i = bad[0]
        raise AssertionError(
            f"{bad.size} mismatches; first at {i}: input {inputs[i]!r} (bits {bits(inputs)[i]:#x}) -> "
            f"{bits(actual)[i]:#x}, expected {bits(expected)[i]:#x}"
        )


def with_canonical_nans(values: np.ndarray, dtype: DType) -> np.ndarray:
    out = values.copy()
    bits(out)[np.isnan(out.astype(np.float32))] = nm.CANONICAL_NAN_BITS[dtype]
    return out


def all_patterns(dtype: DType) -> np.ndarray:
    return np.arange(2 ** (8 * dtype.itemsize), dtype=np.int64).astype(UINT_OF_SIZE[dtype.itemsize])


def hard_f32_inputs(dtype: DType, seed: int = 0) -> np.ndarray:
    """fp32 values that probe a narrow format's rounding: random bit patterns, fp32 subnormals,
    NaN payloads, +-0/inf, every representable value of the format, every midpoint between
    neighbours (exact ties) and the fp32 values just either side of it, and the overflow edge."""
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f32_subnormals = (rng.integers(0, 2**23, 2000) | (rng.integers(0, 2, 2000) << 31)).astype(np.uint32)
    f32_subnormals = f32_subnormals.view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0], np.float32)
    representable = nm.decode(all_patterns(dtype).view(dtype.numpy), dtype).astype(np.float64)
    finite = np.unique(representable[np.isfinite(representable)])
    biggest, below = finite[-1], finite[-2]
    beyond = biggest + (biggest - below)  # where the next code would be, if the format had one
    edges = np.array([beyond, (biggest + beyond) / 2, 2 * biggest, 1e38])
    points = np.concatenate([finite, (finite[1:] + finite[:-1]) / 2, edges, -edges])
    points = points[np.abs(points) <= np.finfo(np.float32).max].astype(np.float32)
    up, down = np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(-np.inf))
    return np.concatenate([random_bits, f32_subnormals, NAN_PAYLOADS, specials, points, up, down])


def library_encode(values: np.ndarray, dtype: DType) -> np.ndarray:
    """ml_dtypes' (numpy's, for fp16) conversion, unmodified."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dtype.numpy)


# --- Canonical NaNs ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_canonical_nan_is_what_np_nan_converts_to(dtype):
    """Rule: the canonical NaN of each format is the positive quiet NaN ml_dtypes/numpy produce
    for np.nan (fp32 0x7FC00000, bf16 0x7FC0, fp16 0x7E00, e4m3 0x7C, e5m2 0x7E, e4m3fn 0x7F)."""
    converted = np.array([np.nan], np.float32).astype(dtype.numpy)
    assert bits(converted)[0] == nm.CANONICAL_NAN_BITS[dtype]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_every_nan_is_stored_and_loaded_canonical(dtype):
    """Rule: a NaN of any sign and payload is written as the format's canonical NaN, and every
    NaN pattern in memory loads as fp32 0x7FC00000."""
    stored_np, stored_nb = nm.encode(NAN_PAYLOADS, dtype), numba_store(NAN_PAYLOADS, dtype)
    assert (bits(stored_np) == nm.CANONICAL_NAN_BITS[dtype]).all()
    assert (bits(stored_nb) == nm.CANONICAL_NAN_BITS[dtype]).all()
    if dtype.itemsize == 4:
        loaded = nm.decode(NAN_PAYLOADS, dtype)
        assert (bits(loaded) == 0x7FC00000).all()
        assert (bits(numba_load(NAN_PAYLOADS, dtype)) == 0x7FC00000).all()


# --- Decode --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=lambda d: d.name)
def test_decode_every_bit_pattern_matches_ml_dtypes(dtype):
    """Rule: loads are exact — every non-NaN pattern of bf16/fp16/fp8 decodes to the same fp32
    bits as ml_dtypes/numpy astype (subnormals, +-0, +-inf included); NaNs decode canonical."""
    raw = all_patterns(dtype).view(dtype.numpy)
    expected = with_canonical_nans(raw.astype(np.float32), DType.float32)
    assert_same_bits(nm.decode(raw, dtype), expected, raw)
    assert_same_bits(numba_load(raw, dtype), expected, raw)


@pytest.mark.parametrize("dtype", [DType.float32, DType.tfloat32], ids=lambda d: d.name)
def test_decode_fp32_is_identity_except_nan(dtype):
    """Rule: fp32 and tfloat32 memory loads as the fp32 it holds (tf32 is not re-rounded on load)."""
    raw = np.random.default_rng(1).integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    raw = raw.view(np.float32)
    expected = with_canonical_nans(raw, DType.float32)
    assert_same_bits(nm.decode(raw, dtype), expected, raw)
    assert_same_bits(numba_load(raw, dtype), expected, raw)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_decode_int_converts_value_rounding_to_nearest_even(dtype):
    """Rule: integers load as their value in fp32; beyond 2^24 that rounds to nearest even,
    as numpy's astype does (16777217 -> 16777216, 16777219 -> 16777220)."""
    info = np.iinfo(dtype.numpy)
    edge = [info.min, info.max, 0, 1, -1, 16777217, 16777219, -16777217, 2**31 - 65, 2**32 - 129]
    random = np.random.default_rng(2).integers(info.min, int(info.max) + 1, 50_000, dtype=np.int64)
    raw = np.concatenate([np.array(edge, np.int64), random]).astype(dtype.numpy)  # wraps edge cases in
    expected = raw.astype(np.float32)
    assert_same_bits(nm.decode(raw, dtype), expected, raw)
    assert_same_bits(numba_load(raw, dtype), expected, raw)


def test_decode_bool_reads_any_nonzero_byte_as_one():
    """Rule: a bool byte loads as 1.0 if nonzero (as 1 from load_i64), else 0.0."""
    raw = np.arange(256, dtype=np.uint8).view(np.bool_)
    expected = (np.arange(256) != 0).astype(np.float32)
    assert_same_bits(nm.decode(raw, DType.bool_), expected, raw)
    assert_same_bits(numba_load(raw, DType.bool_), expected, raw)
    assert (nm.decode_int(raw, DType.bool_) == expected).all()
    assert (numba_load_int(raw, DType.bool_) == expected).all()


def test_decode_rejects_a_wrongly_viewed_array():
    """Rule: decode takes data viewed as DType(code).numpy, so a mix-up fails loudly."""
    with pytest.raises(TypeError, match="bfloat16"):
        nm.decode(np.zeros(4, np.uint16), DType.bfloat16)


# --- Encode, floats ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=lambda d: d.name)
def test_encode_matches_ml_dtypes_round_to_nearest_even(dtype):
    """Rule: fp32 -> bf16/fp16/fp8 rounds to nearest even exactly as ml_dtypes (numpy for fp16),
    ties, subnormals and overflow included; where the library gives a NaN, ours is canonical."""
    values = hard_f32_inputs(dtype)
    expected = with_canonical_nans(library_encode(values, dtype), dtype)
    assert_same_bits(nm.encode(values, dtype), expected, values)
    assert_same_bits(numba_store(values, dtype), expected, values)


def test_encode_fp16_matches_pythons_own_half_packing():
    """Rule: fp16 RNE, checked against an implementation independent of numpy (struct 'e');
    values too big for it overflow to inf."""
    values = hard_f32_inputs(DType.float16, seed=3)
    values = values[~np.isnan(values)]
    expected = np.empty(len(values), np.uint16)
    for i, v in enumerate(values.tolist()):
        try:
            expected[i] = struct.unpack("<H", struct.pack("<e", v))[0]
        except OverflowError:
            expected[i] = 0xFC00 if v < 0 else 0x7C00
    assert_same_bits(bits(nm.encode(values, DType.float16)), expected, values)


@pytest.mark.parametrize(
    ("dtype", "value", "code"),
    [
        (DType.float8_e4m3, 240.0, 0x77),
        (DType.float8_e4m3, 247.99, 0x77),
        (DType.float8_e4m3, 248.0, 0x78),  # tie with the would-be 256: to even, which is inf
        (DType.float8_e4m3, -1e6, 0xF8),
        (DType.float8_e5m2, 61439.0, 0x7B),
        (DType.float8_e5m2, 61440.0, 0x7C),
        (DType.float8_e5m2, -np.inf, 0xFC),
        (DType.float8_e4m3fn, 464.0, 0x7E),  # tie: to even 448, not to NaN
        (DType.float8_e4m3fn, 464.5, 0x7F),
        (DType.float8_e4m3fn, -1e6, 0x7F),  # overflow NaN is canonical, sign dropped
        (DType.float8_e4m3fn, np.inf, 0x7F),
        (DType.float16, 65519.0, 0x7BFF),
        (DType.float16, 65520.0, 0x7C00),
        (DType.float16, 2.0**-25, 0x0000),  # half the smallest subnormal: tie to even 0
        (DType.float16, -(2.0**-25) * 3, 0x8002),  # 1.5 subnormal ulps: tie to even 2
        (DType.bfloat16, 3.3961776e38, 0x7F80),
    ],
)
def test_encode_overflow_and_tie_cases(dtype, value, code):
    """Rule: overflow goes to inf for IEEE-style formats and to (canonical) NaN for e4m3fn; exact
    ties round to the even code, even when the even neighbour is inf."""
    values = np.array([value], np.float32)
    assert bits(nm.encode(values, dtype))[0] == code
    assert bits(numba_store(values, dtype))[0] == code


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=lambda d: d.name)
def test_every_representable_value_stores_exactly(dtype):
    """Rule: storing a value the format can hold writes exactly its pattern (round trip)."""
    raw = all_patterns(dtype).view(dtype.numpy)
    raw = raw[~np.isnan(raw.astype(np.float32))]
    values = nm.decode(raw, dtype)
    assert_same_bits(nm.encode(values, dtype), raw, values)
    assert_same_bits(numba_store(values, dtype), raw, values)


def tf32_oracle(x: float) -> float:
    """Round a finite float to 10 mantissa bits, nearest even, with Python's exact arithmetic."""
    if x == 0 or math.isinf(x):
        return x
    exponent = max(math.frexp(x)[1] - 1, -126)  # fp32 subnormals share the smallest exponent
    ulp = 2.0 ** (exponent - 10)
    rounded = round(x / ulp) * ulp  # round() is half-to-even; /ulp and *ulp are exact
    return math.copysign(math.inf, x) if abs(rounded) >= 2.0**128 else math.copysign(rounded, x)


def test_encode_tfloat32_rounds_away_13_mantissa_bits_to_nearest_even():
    """Rule: tfloat32 is fp32 with the low 13 mantissa bits rounded off RNE (overflow -> inf),
    checked against exact rational rounding."""
    rng = np.random.default_rng(4)
    random_bits = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**19, 5000).astype(np.uint32) << 13) | 0x1000
    edges = np.array([0x7F7FFFFF, 0x7F7FF000, 0x7F7FEFFF, 0x00001000, 0x00003000, 0x80000FFF], np.uint32)
    values = np.concatenate([random_bits, ties, ties - 1, ties + 1, edges]).view(np.float32)
    values = values[~np.isnan(values)]
    expected = np.array([tf32_oracle(v) for v in values.tolist()], np.float32)
    assert_same_bits(nm.encode(values, DType.tfloat32), expected, values)
    assert_same_bits(numba_store(values, DType.tfloat32), expected, values)
    assert (bits(expected) & 0x1FFF == 0).all()


# --- Encode, integers and bool --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "value", "stored"),
    [
        (DType.int8, 0.5, 0),
        (DType.int8, 1.5, 2),
        (DType.int8, 2.5, 2),
        (DType.int8, -0.5, 0),
        (DType.int8, -1.5, -2),
        (DType.int8, 127.5, 127),  # rounds to 128, saturates
        (DType.int8, -128.5, -128),
        (DType.int8, 1e10, 127),
        (DType.int8, -np.inf, -128),
        (DType.int8, np.nan, 0),
        (DType.uint8, -1.0, 0),
        (DType.uint8, -0.4, 0),
        (DType.uint8, 255.5, 255),
        (DType.int16, 32767.5, 32767),
        (DType.uint16, np.inf, 65535),
        (DType.int32, 2147483648.0, 2147483647),  # 2^31: first fp32 above the range
        (DType.int32, -2147483648.0, -2147483648),
        (DType.int32, np.nan, 0),
        (DType.uint32, 4294967296.0, 4294967295),
        (DType.uint32, 4294967040.0, 4294967040),  # largest fp32 below 2^32 is exact
        (DType.uint32, -np.inf, 0),
    ],
)
def test_encode_int_rounds_half_even_and_saturates(dtype, value, stored):
    """Rule: fp32 -> int rounds to nearest even, saturates to the type's range, NaN -> 0."""
    values = np.array([value], np.float32)
    assert nm.encode(values, dtype)[0] == stored
    assert numba_store(values, dtype)[0] == stored


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_encode_int_random_values_match_exact_rule(dtype):
    """Rule: fp32 -> int is clamp(round-half-even(x)), for values across and beyond the range."""
    values = hard_f32_inputs(DType.float8_e4m3, seed=5)
    values = values[~np.isnan(values)]  # NaN -> 0 is checked by the table above
    lo, hi = nm.INT_RANGE[dtype]
    expected = np.array(
        [min(max(round(v), lo), hi) if math.isfinite(v) else (hi if v > 0 else lo) for v in values.tolist()],
        np.int64,
    ).astype(dtype.numpy)
    assert_same_bits(nm.encode(values, dtype), expected, values)
    assert_same_bits(numba_store(values, dtype), expected, values)


def test_encode_bool_is_nonzero_nan_included():
    """Rule: fp32 -> bool stores 0 for +-0.0 and 1 for anything else, NaN and subnormals included."""
    values = np.concatenate([np.array([0.0, -0.0, 1e-45, -1.0, np.inf], np.float32), NAN_PAYLOADS])
    expected = np.array([0, 0, 1, 1, 1] + [1] * len(NAN_PAYLOADS), np.uint8)
    assert (nm.encode(values, DType.bool_).view(np.uint8) == expected).all()
    assert (numba_store(values, DType.bool_).view(np.uint8) == expected).all()


# --- Integer bits: load_i64 / store_i64 -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [*INTS, DType.bool_], ids=lambda d: d.name)
def test_store_i64_saturates_instead_of_wrapping(dtype):
    """Rule: store_i64 clamps an int64 to the type's range (no wraparound); bool stores value != 0."""
    edge = [0, 1, -1, 127, 128, -129, 255, 256, 32768, -32769, 65536, 2**31, -(2**31) - 1, 2**32]
    edge += [2**63 - 1, -(2**63)]
    random = np.random.default_rng(6).integers(-(2**40), 2**40, 10_000)
    values = np.concatenate([np.array(edge, np.int64), random])
    if dtype is DType.bool_:
        expected = values != 0
    else:
        lo, hi = nm.INT_RANGE[dtype]
        expected = np.array([min(max(v, lo), hi) for v in values.tolist()], np.int64).astype(dtype.numpy)
    assert_same_bits(nm.encode_int(values, dtype), expected, values)
    assert_same_bits(numba_store_int(values, dtype), expected, values)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_load_i64_sign_or_zero_extends(dtype):
    """Rule: load_i64 returns the integer's value: signed types sign-extend, unsigned zero-extend."""
    raw = all_patterns(DType.uint16).astype(np.int64) * 65537  # spreads over 32 bits too
    raw = raw.astype(UINT_OF_SIZE[dtype.itemsize]).view(dtype.numpy)
    expected = raw.astype(np.int64)
    assert (nm.decode_int(raw, dtype) == expected).all()
    assert (numba_load_int(raw, dtype) == expected).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_int_access_to_float_dtypes_moves_raw_bits(dtype):
    """Rule: on a float dtype load_i64 is the zero-extended bit pattern (NaNs untouched) and
    store_i64 writes the value's low bytes, so bitcasts round-trip exactly."""
    uint = UINT_OF_SIZE[dtype.itemsize]
    patterns = np.random.default_rng(7).integers(0, 2**32, 5000, dtype=np.uint64).astype(uint)
    raw = patterns.view(dtype.numpy)
    expected = patterns.astype(np.int64)
    assert (nm.decode_int(raw, dtype) == expected).all()
    assert (numba_load_int(raw, dtype) == expected).all()
    wide = expected | (1 << 40)  # bits above the itemsize are dropped
    assert_same_bits(nm.encode_int(wide, dtype), raw, wide)
    assert_same_bits(numba_store_int(wide, dtype), raw, wide)


# --- Both executors, any input ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=32),
    st.sampled_from(list(DType)),
    st.integers(0, 3),
)
def test_numba_and_numpy_agree_on_any_fp32_bits(patterns, dtype, offset):
    """Rule: for every dtype and any fp32 bit pattern, store_f32 == encode and load_f32 == decode
    bit for bit, also at unaligned addresses."""
    values = np.array(patterns, np.uint32).view(np.float32)
    stored = nm.encode(values, dtype)
    assert_same_bits(numba_store(values, dtype, offset), stored, values)
    assert_same_bits(numba_load(stored, dtype, offset), nm.decode(stored, dtype), values)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=32), st.sampled_from(list(DType)))
def test_numba_and_numpy_agree_on_any_int64(values, dtype):
    """Rule: for every dtype and any int64, store_i64 == encode_int and load_i64 == decode_int."""
    values = np.array(values, np.int64)
    stored = nm.encode_int(values, dtype)
    assert_same_bits(numba_store_int(values, dtype), stored, values)
    assert (numba_load_int(stored, dtype) == nm.decode_int(stored, dtype)).all()


# --- Disk cache --------------------------------------------------------------------------------------


def test_accessors_are_loaded_from_numbas_disk_cache(tmp_path):
    """Rule: the accessors are cache=True, so a second fresh process loads them from disk instead
    of compiling them again."""
    script = textwrap.dedent(
        """
        from neuronsim.sim.memory import numerics as nm
        # load_i64 first: compiled as load_f32's callee it would be cached under another key.
        sigs = {nm.load_i64: "(int64, int64)", nm.store_i64: "(int64, int64, int64)",
                nm.load_f32: "(int64, int64)", nm.store_f32: "(int64, int64, float32)"}
        for fn, sig in sigs.items():
            fn.compile(sig)
        print(sum(len(fn.stats.cache_hits) for fn in sigs), sum(len(fn.stats.cache_misses) for fn in sigs))
        """
    )
    env = {**os.environ, "NEURON_SIM_CACHE_DIR": str(tmp_path)}  # see neuronsim/sim/_numba_cache.py

    def run() -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        hits, misses = out.stdout.split()
        return int(hits), int(misses)

    assert run() == (0, 4)
    assert run() == (4, 0)
