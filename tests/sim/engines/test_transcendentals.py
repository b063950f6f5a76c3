"""exp, erf and gelu of ScalarE (``sim/engines/transcendentals.py``): the Numba functions and their
numpy twins agree bit for bit, and their fp32 roundings are accurate (against libm on dense sweeps,
against 40-digit mpmath on samples). The erfc coefficients are the interpolants they claim to be."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from numba import njit

from neuronsim.sim.engines import transcendentals as T

FUNCS = {"exp": 0, "erf": 1, "gelu": 2}
TWINS = {"exp": T.exp_np, "erf": T.erf_np, "gelu": T.gelu_np}


@njit  # not cached: Numba would not notice a change to transcendentals.py from this file
def _numba_values(which, x):
    out = np.empty_like(x)
    for i in range(x.size):
        if which == 0:
            out[i] = T.exp64(x[i])
        elif which == 1:
            out[i] = T.erf64(x[i])
        else:
            out[i] = T.gelu64(x[i])
    return out


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, -1.17e-38, 3.4e38, -3.4e38,
                     88.72, 88.73, -87.33, -103.9, -104.0, 700.0, -700.0, 709.0, 710.0, -745.0, 1.0, -1.0,
                     np.nextafter(1.0, 0.0), 6.0, -6.0, 11.0, -11.0, 1.4142135, -1.4142135, 15.556, -15.556,
                     2.0**-64, -(2.0**-64)], dtype=np.float32)


def _fp32_inputs(rng, n: int) -> np.ndarray:
    """float64 values of fp32 numbers: random bit patterns (every exponent, subnormals, NaNs with
    payloads, infs), dense sweeps of the interesting ranges, and the special values."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    sweeps = [np.linspace(lo, hi, n // 2, dtype=np.float64).astype(np.float32)
              for lo, hi in ((-110, 95), (-20, 20), (-2, 2))]
    with np.errstate(invalid="ignore"):  # signaling NaNs raise "invalid" when widened
        return np.concatenate([SPECIALS, bits, *sweeps]).astype(np.float64)


@njit
def _central_values(gelu, x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = T.gelu_central(x[i]) if gelu else T.erf_central(x[i])
    return out


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("name", FUNCS)
def test_numba_and_numpy_agree_bit_for_bit(name):
    """Same float64 bits from both twins on 1.5M inputs, specials included (NaN stays NaN)."""
    x = _fp32_inputs(np.random.default_rng(FUNCS[name]), 300_000)
    got, want = _numba_values(FUNCS[name], x), TWINS[name](x)
    same = _same_bits(got, want)
    assert same.all(), f"{name}: {np.count_nonzero(~same)} differ, first at x={x[~same][:5]}"


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in fp32 ulps (monotone integer map of the bit patterns)."""
    ia, ib = (v.astype(np.float32).view(np.int32).astype(np.int64) for v in (a, b))
    ia, ib = (np.where(i < 0, -(i & 0x7FFFFFFF), i) for i in (ia, ib))
    return np.abs(ia - ib)


def _gelu_libm(v: float) -> float:
    return v * 0.5 * math.erfc(-v / math.sqrt(2.0))  # erfc: no cancellation for negative v


LIBM = {"exp": lambda v: math.exp(v) if v < 709 else math.inf, "erf": math.erf, "gelu": _gelu_libm}
MPMATH = {"exp": mpmath.exp, "erf": mpmath.erf, "gelu": lambda v: v * mpmath.erfc(-v / mpmath.sqrt(2)) / 2}
RANGES = {"exp": (-104.0, 88.7), "erf": (-6.5, 6.5), "gelu": (-16.0, 9.0)}


@pytest.mark.parametrize("name", FUNCS)
def test_fp32_results_are_within_one_ulp_and_almost_always_correctly_rounded(name):
    """fp32(f(x)) on a dense sweep of the range where the fp32 result is neither 0, +-1 nor inf:
    at most 1 ulp from the libm value's rounding, equal to it on all but a handful, and equal to
    40-digit mpmath's on a random sample."""
    lo, hi = RANGES[name]
    x = np.linspace(lo, hi, 400_001).astype(np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        mine = TWINS[name](x).astype(np.float32)
        libm = np.array([LIBM[name](v) for v in x]).astype(np.float32)
    ulps = _ulps(mine, libm)
    assert ulps.max() <= 1
    assert np.count_nonzero(ulps) <= 4
    mpmath.mp.dps = 40
    sample = np.random.default_rng(5).choice(x, 1500, replace=False)
    truth = np.array([float(MPMATH[name](mpmath.mpf(float(v)))) for v in sample]).astype(np.float32)
    assert _ulps(TWINS[name](sample).astype(np.float32), truth).max() == 0


def test_limits_and_special_values():
    """exp: 0 and inf beyond the clamps, NaN stays NaN; erf(+-0) keeps the sign, +-1 in the tails;
    gelu(-inf) = 0 (the limit), gelu(+inf) = inf, -0.0 for large finite negatives (x * 0)."""
    x = np.array([-np.inf, -1e4, -0.0, 0.0, 1e4, np.inf, np.nan])
    for fn in (T.exp_np, lambda v: _numba_values(0, v)):
        np.testing.assert_array_equal(fn(x), [0.0, 0.0, 1.0, 1.0, np.inf, np.inf, np.nan])
    for fn in (T.erf_np, lambda v: _numba_values(1, v)):
        y = fn(x)
        np.testing.assert_array_equal(y, [-1.0, -1.0, -0.0, 0.0, 1.0, 1.0, np.nan])
        assert np.signbit(y[2]) and not np.signbit(y[3])
    for fn in (T.gelu_np, lambda v: _numba_values(2, v)):
        y = fn(x)
        np.testing.assert_array_equal(y, [0.0, -0.0, -0.0, 0.0, 1e4, np.inf, np.nan])
        assert not np.signbit(y[0]) and np.signbit(y[1])


def test_erfc_coefficients_are_the_interpolants():
    """The stored Chebyshev coefficients of (a + 3) exp(a^2) erfc(a) are recomputed from mpmath."""
    mpmath.mp.dps = 40
    n = T.ERFC_DEGREE + 1
    k = mpmath.mpf(T.ERFC_K)
    t_lo, t_hi = mpmath.mpf(T._T_LO), mpmath.mpf(T._T_HI)  # the float64 ends the evaluation maps onto
    values = []
    for i in range(n):
        s = mpmath.cos(mpmath.pi * (i + mpmath.mpf(0.5)) / n)
        t = t_lo + (t_hi - t_lo) * (s + 1) / 2
        a = k * (1 + t) / (1 - t)
        values.append(mpmath.exp(a * a) * mpmath.erfc(a) * (a + k))
    coefficients = [2 * sum(values[i] * mpmath.cos(mpmath.pi * j * (i + mpmath.mpf(0.5)) / n) for i in range(n)) / n
                    for j in range(n)]
    coefficients[0] /= 2
    np.testing.assert_array_equal(T._ERFC_CHEB, [float(c) for c in coefficients])


@pytest.mark.parametrize("name", ["erf", "gelu"])
def test_central_formulas_are_the_functions_inside_their_region(name):
    """The loops that run the cheap central formula on every element and the whole function on
    the rest rely on the two being the same bits inside the central region."""
    x = np.linspace(-1.5, 1.5, 200_001).astype(np.float32).astype(np.float64)
    x = np.concatenate([x, -x * 1e-30, [0.0, -0.0, 1e-45, -1e-45]])
    gelu = name == "gelu"
    inside = np.abs(x * T.INV_SQRT2 if gelu else x) < T.CENTRAL_TOP
    assert inside.sum() > 100_000
    central, whole = _central_values(gelu, x[inside]), _numba_values(FUNCS[name], x[inside])
    assert _same_bits(central, whole).all()
