"""ScalarE's exp, erf and gelu without libm: float64 range reduction and polynomials, one
sequence of IEEE operations written twice (Numba scalar functions, numpy array twins).

Why: ScalarE evaluates its functions from fp32 tables and polynomials whose exact form is not
published; the simulator's contract is ``func`` evaluated accurately on the fp32 argument and
rounded to fp32 once. Calling libm for that (one call per element, no vectorization) made exp, erf
and gelu the slowest instructions of a training step. These versions use only ``+ - * /``, compares
and bit moves in float64, so LLVM vectorizes them, and numpy performs the very same roundings in the
same order (Numba compiles without fast-math: no FMA contraction, no reassociation), which keeps the
two executors bit-identical. Their float64 error is a few ulp (2^-50 relative), far below fp32's
half ulp (2^-25): after the rounding to fp32 the result is the correctly rounded one except when the
exact value lies within ~2^-50 of a rounding boundary, and never more than 1 fp32 ulp away
(tests/sim/engines/test_transcendentals.py checks both against mpmath / math on dense sweeps).

- ``exp``: ``x = k ln2 + r`` (Cody-Waite: ``k * LN2_HI`` is exact, ``|r| <= ln2 / 2``), degree-13
  Taylor polynomial for ``e^r`` (truncation < 2^-57), times ``2^k`` built from its bits. Inputs are
  clamped to [-700, 709] (normal float64 results); beyond, the limits 0 and inf.
- ``erf``: ``|x| < 1``: ``x * P(x^2)``, the Taylor series to degree 37. Otherwise
  ``1 - e^(-x^2) G(|x|)`` with ``G(a) = e^(a^2) erfc(a)`` on [0, 11]: ``(a + 2) G(a)`` is a
  degree-22 Chebyshev interpolant in ``t = (a - 2) / (a + 2)`` (Clenshaw evaluation; one
  interval, so no per-element coefficient lookup). ``x * x`` is exact for an fp32 ``x``, so
  the steep ``e^(-x^2)`` sees its exact argument. ``|x| >= 6``: +-1 (erfc(6) < 2^-55).
- ``gelu``: ``x * Phi(x)``. ``|x| / sqrt2 < 1``: ``Phi = 1/2 + erf(x / sqrt2) / 2`` by the series.
  Otherwise from ``Q = erfc(|x| / sqrt2) / 2 = e^(-x^2 / 2) G(|x| / sqrt2) / 2`` (``x^2 / 2``
  exact again), ``Phi = 1 - Q`` for ``x > 0``, else ``Q``: no cancellation for negative ``x``,
  where ``1 + erf(x / sqrt2)`` loses every digit below -8. ``|x| / sqrt2 >= 11``: ``Q = 0``.

A vector unit computes every branch of a piecewise function, so the loops over many elements
(``scalar._act_rows``) evaluate the cheap central formula (``erf_central``, ``gelu_central``: the
series) everywhere and the whole function only for the elements outside, gathered into a buffer:
the same value for every element, a third of the work on typical activations.

The arguments are float64 values of fp32 numbers (what ScalarE's pipeline hands its function).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.memory.numerics import f64_from_bits

# ---------------------------------------------------------------- constants

LN2_HI = float.fromhex("0x1.62e42fefa3000p-1")  # ln 2 with its low 12 bits cleared: k * LN2_HI is exact
LN2_LO = float.fromhex("0x1.3de6af278ece6p-42")  # ln 2 - LN2_HI
INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
_ROUND_SHIFT = 6755399441055744.0  # 1.5 * 2^52: (t + shift) - shift rounds t to an integer, ties to even
_EXP_LO, _EXP_HI = -700.0, 709.0
_EXP_TAYLOR = np.array([1.0 / float(np.prod(np.arange(1, n + 1, dtype=np.float64))) for n in range(14)])

INV_SQRT2 = float.fromhex("0x1.6a09e667f3bcdp-1")
_ERF_SERIES_TERMS = 19  # erf(x) = x * sum_n c_n x^(2n) for |x| < 1: the 20th term is < 2^-58
CENTRAL_TOP = 1.0  # erf's series region |x| < 1, gelu's |x| / sqrt2 < 1


def _erf_series_coefficients() -> np.ndarray:
    """``c_n = 2 / sqrt(pi) * (-1)^n / (n! (2n + 1))``, from exact rationals."""
    from fractions import Fraction
    two_over_sqrt_pi = float.fromhex("0x1.20dd750429b6dp+0")
    out, factorial = [], 1
    for n in range(_ERF_SERIES_TERMS):
        factorial *= max(n, 1)
        out.append(two_over_sqrt_pi * float(Fraction((-1) ** n, factorial * (2 * n + 1))))
    return np.array(out)


_ERF_SERIES = _erf_series_coefficients()

# G(a) = exp(a^2) erfc(a) on [0, 11] as (a + 2) G(a) = C(s), a degree-22 Chebyshev series in
# s = the linear map of t = (a - 2) / (a + 2) onto [-1, 1] (one interval: no per-element coefficient
# lookup, so the loops vectorize). Coefficients from 40-digit mpmath values at the first-kind nodes
# (regenerated and compared by tests/sim/engines/test_transcendentals.py).
ERFC_K, ERFC_LO, ERFC_HI, ERFC_DEGREE = 2.0, 0.0, 11.0, 22
_ERFC_HEX = """
    0x1.3c04203303bb2p+0 -0x1.5492fb035cf72p-1 0x1.9559684849a75p-4 -0x1.7921ea22944cap-9
    -0x1.710ad35d6f1cep-10 0x1.68b1d611f1a54p-14 0x1.0fbff4e2ebdabp-15 -0x1.ed9844696344cp-21
    -0x1.f99e8ef997254p-21 -0x1.b1d5662dcaad5p-25 0x1.a4a2f4d713bf9p-26 0x1.395277dfe1370p-28
    -0x1.110fd6afbde86p-32 -0x1.bdcea7758a61dp-33 -0x1.93d311470886dp-36 0x1.1bd5427ce11c8p-38
    0x1.d5fa1b069bec4p-40 0x1.594ccc0c34c7ep-43 -0x1.6fc1af52874d8p-45 -0x1.15f0eab55f90ap-46
    -0x1.bf8cd714ab6f6p-50 0x1.a07b088b6be0cp-52 0x1.731996e3a1565p-53
"""
_ERFC_CHEB = np.array([float.fromhex(v) for v in _ERFC_HEX.split()])
_T_LO, _T_HI = (ERFC_LO - ERFC_K) / (ERFC_LO + ERFC_K), (ERFC_HI - ERFC_K) / (ERFC_HI + ERFC_K)
_T_MID, _T_INV_HALF = (_T_LO + _T_HI) / 2, 2.0 / (_T_HI - _T_LO)
_ERF_ONE = 6.0  # erf(|x| >= 6) = +-1
_ERFC_TOP = ERFC_HI


# ---------------------------------------------------------------- Numba (scalar float64, inlined)

@njit(cache=True, inline="always")
def exp64(x):
    xc = x if x > _EXP_LO else _EXP_LO  # NaN too: every lane computes finite values
    xc = xc if xc < _EXP_HI else _EXP_HI
    k = (xc * INV_LN2 + _ROUND_SHIFT) - _ROUND_SHIFT
    r = (xc - k * LN2_HI) - k * LN2_LO
    p = _EXP_TAYLOR[13]
    for n in range(12, -1, -1):
        p = p * r + _EXP_TAYLOR[n]
    y = p * f64_from_bits((np.int64(k) + 1023) << 52)
    if x > _EXP_HI:
        return np.inf
    if x < _EXP_LO:
        return 0.0
    return x if x != x else y


@njit(cache=True, inline="always")
def _erf_series(x):
    u = x * x
    p = _ERF_SERIES[_ERF_SERIES_TERMS - 1]
    for n in range(_ERF_SERIES_TERMS - 2, -1, -1):
        p = p * u + _ERF_SERIES[n]
    return x * p


@njit(cache=True, inline="always")
def _erfc_scaled(a):
    """``G(a) = exp(a^2) erfc(a)`` for ``0 <= a <= 11``."""
    # np.true_divide, not /: Numba's / checks for a zero divisor (Python's ZeroDivisionError), and
    # that branch keeps LLVM from vectorizing the loop; a + 2 > 0 here anyway.
    inv = np.true_divide(1.0, a + ERFC_K)
    s = ((a - ERFC_K) * inv - _T_MID) * _T_INV_HALF
    two_s = s + s
    b1 = 0.0
    b2 = 0.0
    for i in range(ERFC_DEGREE, 0, -1):
        t = _ERFC_CHEB[i] + two_s * b1 - b2
        b2 = b1
        b1 = t
    return (_ERFC_CHEB[0] + s * b1 - b2) * inv


@njit(cache=True, inline="always")
def erf64(x):
    # Every candidate is computed, then one is picked: selects, not branches, so the loops vectorize.
    a = abs(x)
    ac = a if a < _ERFC_TOP else _ERFC_TOP
    series = _erf_series(x)
    tail = 1.0 - exp64(-(x * x)) * _erfc_scaled(ac)
    big = tail if x > 0 else -tail
    one = 1.0 if x > 0 else -1.0
    y = big if a < _ERF_ONE else one
    y = series if a < CENTRAL_TOP else y
    return x if x != x else y


@njit(cache=True, inline="always")
def erf_central(x):
    """``erf64(x)`` where ``|x| < CENTRAL_TOP`` (the series alone: a fraction of the work)."""
    return _erf_series(x)


@njit(cache=True, inline="always")
def gelu_central(x):
    """``gelu64(x)`` where ``|x * INV_SQRT2| < CENTRAL_TOP``."""
    return x * (0.5 + 0.5 * _erf_series(x * INV_SQRT2))


@njit(cache=True, inline="always")
def gelu64(x):
    h = x * INV_SQRT2
    a = abs(h)
    ac = a if a < _ERFC_TOP else _ERFC_TOP
    central = 0.5 + 0.5 * _erf_series(h)
    q = 0.5 * exp64((-0.5 * x) * x) * _erfc_scaled(ac)
    q = q if a < _ERFC_TOP else 0.0
    tail = 1.0 - q if x > 0 else q
    phi = central if a < CENTRAL_TOP else tail
    y = x * phi
    y = 0.0 if x == -np.inf else y  # the limit; x * Phi(x) would be -inf * 0
    return x if x != x else y


# ---------------------------------------------------------------- numpy twins (float64 arrays)

def exp_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        xc = np.where(x > _EXP_LO, x, _EXP_LO)
        xc = np.where(xc < _EXP_HI, xc, _EXP_HI)
        k = (xc * INV_LN2 + _ROUND_SHIFT) - _ROUND_SHIFT
        r = (xc - k * LN2_HI) - k * LN2_LO
        p = np.full_like(r, _EXP_TAYLOR[13])
        for n in range(12, -1, -1):
            p = p * r + _EXP_TAYLOR[n]
        y = p * ((k.astype(np.int64) + 1023) << 52).view(np.float64)
        y = np.where(x > _EXP_HI, np.inf, np.where(x < _EXP_LO, 0.0, y))
        return np.where(np.isnan(x), x, y)


def _erf_series_np(x: np.ndarray) -> np.ndarray:
    u = x * x
    p = np.full_like(u, _ERF_SERIES[_ERF_SERIES_TERMS - 1])
    for n in range(_ERF_SERIES_TERMS - 2, -1, -1):
        p = p * u + _ERF_SERIES[n]
    return x * p


def _erfc_scaled_np(a: np.ndarray) -> np.ndarray:
    inv = 1.0 / (a + ERFC_K)
    s = ((a - ERFC_K) * inv - _T_MID) * _T_INV_HALF
    two_s = s + s
    b1 = np.zeros_like(a)
    b2 = np.zeros_like(a)
    for i in range(ERFC_DEGREE, 0, -1):
        b1, b2 = _ERFC_CHEB[i] + two_s * b1 - b2, b1
    return (_ERFC_CHEB[0] + s * b1 - b2) * inv


def erf_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        a = np.abs(x)
        tail = 1.0 - exp_np(-(x * x)) * _erfc_scaled_np(np.where(a < _ERFC_TOP, a, _ERFC_TOP))
        big = np.where(x > 0, tail, -tail)
        outer = np.where(a < _ERF_ONE, big, np.where(x > 0, 1.0, -1.0))
        y = np.where(a < CENTRAL_TOP, _erf_series_np(x), outer)
        return np.where(np.isnan(x), x, y)


def gelu_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h = x * INV_SQRT2
        a = np.abs(h)
        q = 0.5 * exp_np((-0.5 * x) * x) * _erfc_scaled_np(np.where(a < _ERFC_TOP, a, _ERFC_TOP))
        q = np.where(a < _ERFC_TOP, q, 0.0)
        tail = np.where(x > 0, 1.0 - q, q)
        phi = np.where(a < CENTRAL_TOP, 0.5 + 0.5 * _erf_series_np(h), tail)
        y = np.where(x == -np.inf, 0.0, x * phi)
        return np.where(np.isnan(x), x, y)
