"""exp, erf, gelu and gelu_dx of ScalarE (``sim/engines/transcendentals.py``): the Numba functions
and their numpy twins agree bit for bit, and their fp32 roundings are accurate (against libm on dense sweeps,
against 40-digit mpmath on samples). The erfc coefficients are the interpolants they claim to be."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from numba import njit

from neuronsim.sim.engines import scalar
from neuronsim.sim.engines import transcendentals as T
from neuronsim.sim.ir import ActFunc

FUNCS = {"exp": 0, "erf": 1, "gelu": 2, "gelu_dx": 3}
TWINS = {"exp": T.exp_np, "erf": T.erf_np, "gelu": T.gelu_np, "gelu_dx": T.gelu_dx_np}


@njit  # not cached: Numba would not notice a change to transcendentals.py from this file
def _numba_values(which, x):
    out = np.empty_like(x)
    for i in range(x.size):
        if which == 0:
            out[i] = T.exp64(x[i])
        elif which == 1:
            out[i] = T.erf64(x[i])
        elif which == 2:
            out[i] = T.gelu64(x[i])
        else:
            out[i] = T.gelu_dx64(x[i])
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
def _region_values(which, x, central):
    out = np.empty_like(x)
    for i in range(x.size):
        if which == 1:
            out[i] = T.erf_central(x[i]) if central else T.erf_outer(x[i])
        elif which == 2:
            out[i] = T.gelu_central(x[i]) if central else T.gelu_outer(x[i])
        else:
            out[i] = T.gelu_dx_central(x[i]) if central else T.gelu_dx_outer(x[i])
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


def _gelu_dx_libm(v: float) -> float:
    return 0.5 * math.erfc(-v / math.sqrt(2.0)) + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)


def _gelu_dx_mpmath(v):
    return mpmath.erfc(-v / mpmath.sqrt(2)) / 2 + v * mpmath.exp(-v * v / 2) / mpmath.sqrt(2 * mpmath.pi)


LIBM = {"exp": lambda v: math.exp(v) if v < 709 else math.inf, "erf": math.erf, "gelu": _gelu_libm,
        "gelu_dx": _gelu_dx_libm}
MPMATH = {"exp": mpmath.exp, "erf": mpmath.erf, "gelu": lambda v: v * mpmath.erfc(-v / mpmath.sqrt(2)) / 2,
          "gelu_dx": _gelu_dx_mpmath}
RANGES = {"exp": (-104.0, 88.7), "erf": (-6.5, 6.5), "gelu": (-16.0, 9.0), "gelu_dx": (-14.0, 6.0)}


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
    for fn in (T.gelu_dx_np, lambda v: _numba_values(3, v)):  # gelu_dx: 0 and 1 in the limits
        np.testing.assert_array_equal(fn(x), [0.0, -0.0, 0.5, 0.5, 1.0, 1.0, np.nan])


def _interpolant(f, lo, hi, degree: int) -> list[float]:
    """Monomial coefficients of ``f``'s interpolant at the first-kind Chebyshev nodes of [lo, hi],
    solved in 40-digit mpmath and rounded once to float64 (how the stored coefficients were made)."""
    n, lo, hi = degree + 1, mpmath.mpf(lo), mpmath.mpf(hi)
    nodes = [(lo + hi) / 2 + (hi - lo) / 2 * mpmath.cos(mpmath.pi * (i + mpmath.mpf(0.5)) / n)
             for i in range(n)]
    c = mpmath.lu_solve(mpmath.matrix([[v**j for j in range(n)] for v in nodes]),
                        mpmath.matrix([f(v) for v in nodes]))
    return [float(c[j]) for j in range(n)]


def _exp_q(r):  # (e^r - 1 - r) / r^2 by its series: no cancellation near 0
    return sum(r**k / mpmath.factorial(k + 2) for k in range(40))


def _erf_p(u):  # erf(sqrt(u)) / sqrt(u)
    return mpmath.erf(mpmath.sqrt(u)) / mpmath.sqrt(u)


def _erfc_c(s):  # (a + K) e^(a^2) erfc(a) at the a whose t = (a - K) / (a + K) maps to s
    t = mpmath.mpf(T.T_MID) + s / mpmath.mpf(T.T_INV_HALF)  # the float64 map the evaluation uses
    a = T.ERFC_K * (1 + t) / (1 - t)
    return mpmath.exp(a * a) * mpmath.erfc(a) * (a + T.ERFC_K)


def test_coefficients_are_the_interpolants():
    """The stored polynomials are recomputed from mpmath, bit for bit."""
    mpmath.mp.dps = 40
    half_ln2 = mpmath.log(2) / 2
    np.testing.assert_array_equal(T.EXP_Q, _interpolant(_exp_q, -half_ln2, half_ln2, T.EXP_Q.size - 1))
    np.testing.assert_array_equal(T.ERF_P, _interpolant(_erf_p, 0, 1, T.ERF_P.size - 1))
    np.testing.assert_array_equal(T.ERFC_C, _interpolant(_erfc_c, -1, 1, T.ERFC_C.size - 1))


def _relative_error_log2(got: np.ndarray, x: np.ndarray, f, floor: float = 2.0**-126) -> float:
    """log2 of the largest relative error; relative to ``floor`` below it (fp32's smallest normal:
    gelu's fp32 results underflow long before its float64 tail stops at 0)."""
    truth = np.array([float(f(mpmath.mpf(float(v)))) for v in x])
    return float(np.log2(np.max(np.abs(got - truth) / np.maximum(np.abs(truth), floor))))


# gelu_dx crosses 0 at x ~ -0.75, where its two terms cancel: there its float64 error is absolute
# (below 2^-53), so it is measured relative to max(|gelu_dx|, 1/16).
FLOORS = {"gelu_dx": 2.0**-4}


@pytest.mark.parametrize("name", FUNCS)
def test_float64_error_is_far_below_fp32_half_ulp(name):
    """Relative float64 error of each function on a random sample of its working range, against
    40-digit mpmath: below 2^-49 (fp32's half ulp is 2^-25), so the fp32 rounding is almost always
    the correct one."""
    mpmath.mp.dps = 40
    lo, hi = RANGES[name]
    x = np.random.default_rng(7).uniform(lo, hi, 3000).astype(np.float32).astype(np.float64)
    x = x[x != 0]
    assert _relative_error_log2(TWINS[name](x), x, MPMATH[name], FLOORS.get(name, 2.0**-126)) < -49


@pytest.mark.parametrize("name", ["erf", "gelu", "gelu_dx"])
def test_central_and_outer_formulas_are_the_function_in_their_regions(name):
    """The loops that run the central formula on every element and the outer one on the rest
    rely on each being the same bits as the whole function in its region."""
    x = np.linspace(-1.5, 1.5, 200_001).astype(np.float32).astype(np.float64)
    x = np.concatenate([x, -x * 1e-30, [0.0, -0.0, 1e-45, -1e-45],
                        _fp32_inputs(np.random.default_rng(9), 50_000)])
    inside = np.abs(x if name == "erf" else x * T.INV_SQRT2) < T.CENTRAL_TOP
    assert inside.sum() > 100_000 and (~inside).sum() > 50_000
    which = FUNCS[name]
    whole = _numba_values(which, x)
    central, outer = _region_values(which, x[inside], True), _region_values(which, x[~inside], False)
    assert _same_bits(central, whole[inside]).all()
    assert _same_bits(outer, whole[~inside]).all()


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 4097), (2, 8192), (5, 3001)])
def test_activation_row_loops_give_the_twins_values(name, shape):
    """scalar._act_rows (flagging, compaction and gather chunk by chunk for erf and gelu) gives
    every element the numpy twin's fp32 value: sizes around the chunk length, mixes of central and
    outer elements, specials anywhere, a chunk with no outer element."""
    rng = np.random.default_rng(sum(shape) + FUNCS[name])
    x = (rng.standard_normal(shape) * rng.choice([0.3, 1.0, 4.0], shape)).astype(np.float32)
    flat = x.reshape(-1)
    spots = rng.choice(flat.size, min(flat.size, SPECIALS.size), replace=False)
    flat[spots] = SPECIALS[:spots.size]
    if flat.size >= 2 * scalar._CHUNK:  # a first chunk with central elements only
        flat[:scalar._CHUNK] = rng.uniform(-0.7, 0.7, scalar._CHUNK)
    one, minus_zero = np.ones(shape[0], np.float32), np.full(shape[0], -0.0, np.float32)  # x * 1 + -0 = x
    y = np.empty_like(x)
    scalar._act_rows(int(ActFunc[name]), x, one, minus_zero, y)
    with np.errstate(over="ignore"):  # exp overflowing fp32 is inf, a value
        want = TWINS[name](x.astype(np.float64)).astype(np.float32)
    assert _same_bits(y.astype(np.float64), want.astype(np.float64)).all()
