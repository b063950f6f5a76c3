"""ScalarE's exp, erf, gelu and gelu_dx without libm: float64 range reduction and polynomials, one
sequence of IEEE operations written twice (Numba scalar functions, numpy array twins).

Why: ScalarE evaluates its functions from fp32 tables and polynomials whose exact form is not
published; the simulator's contract is ``func`` evaluated accurately on the fp32 argument and
rounded to fp32 once. Calling libm for that (one call per element, no vectorization) made exp, erf
and gelu the slowest instructions of a training step. These versions use only ``+ - * /``, compares
and bit moves in float64, so LLVM vectorizes them, and numpy performs the very same roundings in the
same order (Numba compiles without fast-math: no FMA contraction, no reassociation), which keeps the
two executors bit-identical. Their float64 error is below 2^-49 relative (measured against 40-digit
mpmath), far below fp32's half ulp (2^-25): after the rounding to fp32 the result is the correctly
rounded one except when the exact value lies within ~2^-49 of a rounding boundary, and never more
than 1 fp32 ulp away (tests/sim/engines/test_transcendentals.py checks both on dense sweeps).

The polynomials are interpolants at Chebyshev nodes (near-minimax: a few degrees below the Taylor
series of the same accuracy), stored as float64 monomial coefficients and evaluated in even and odd
halves, ``E(x^2) + x O(x^2)``: two independent Horner chains, half the latency of one (no FMA, so
each step is a multiply, then an add).

- ``exp``: ``x = k ln2 + r`` (Cody-Waite: ``k * LN2_HI`` is exact, ``|r| <= ln2 / 2``),
  ``e^r = 1 + (r + r^2 Q(r))`` with Q of degree 9 (error 2^-52), times ``2^k`` built from its bits.
  Inputs are clamped to [-700, 709] (normal float64 results); beyond, the limits 0 and inf.
- ``erf``: ``|x| < 1``: ``x * P(x^2)``, P of degree 11 (the central formula). Otherwise (the
  outer formula) ``1 - e^(-x^2) G(|x|)`` with ``G(a) = e^(a^2) erfc(a)`` on [1, 11]: ``(a + 3) G(a)``
  is a degree-16 polynomial in ``t = (a - 3) / (a + 3)`` mapped onto [-1, 1] (one interval, so no
  per-element coefficient lookup). ``x * x`` is exact for an fp32 ``x``, so the steep ``e^(-x^2)``
  sees its exact argument. ``|x| >= 6``: +-1 (erfc(6) < 2^-55).
- ``gelu``: ``x * Phi(x)``. ``|x| / sqrt2 < 1``: ``Phi = 1/2 + erf(x / sqrt2) / 2`` by P. Otherwise
  from ``Q = erfc(|x| / sqrt2) / 2 = e^(-x^2 / 2) G(|x| / sqrt2) / 2`` (``x^2 / 2`` exact again),
  ``Phi = 1 - Q`` for ``x > 0``, else ``Q``: no cancellation for negative ``x``, where
  ``1 + erf(x / sqrt2)`` loses every digit below -8. ``|x| / sqrt2 >= 11``: ``Q = 0``.
- ``gelu_dx`` (gelu's derivative): ``Phi(x) + x phi(x)``, ``phi(x) = e^(-x^2 / 2) / sqrt(2 pi)``,
  ``Phi`` as in gelu (central and outer formulas), one ``e^(-x^2 / 2)`` for both terms. The terms
  cancel at the root x ~ -0.75, but their float64 errors (~2^-54 absolute) stay far below the fp32
  ulp of the values the nearest fp32 arguments give (~1e-8). ``gelu_dx(+inf) = 1``, ``(-inf) = 0``.

A vector unit computes every branch of a piecewise function, so the loops over many elements
(``scalar._act_rows``) evaluate the central formula (``erf_central``, ``gelu_central``,
``gelu_dx_central``) everywhere and the outer one only for the elements outside, gathered into a
buffer: ``erf64``, ``gelu64`` and ``gelu_dx64`` are the select between the same two, so every
element gets the same value either way, for a fraction of the work on typical activations.

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
INV_SQRT2 = float.fromhex("0x1.6a09e667f3bcdp-1")
INV_SQRT_2PI = float.fromhex("0x1.9884533d43651p-2")  # 1 / sqrt(2 pi)
CENTRAL_TOP = 1.0  # erf's series region |x| < 1, gelu's |x| / sqrt2 < 1


def _hex(text: str) -> np.ndarray:
    return np.array([float.fromhex(v) for v in text.split()])


# The polynomials: each the interpolant of its function at the first-kind Chebyshev nodes of its
# interval (near-minimax), solved in 40-digit mpmath and rounded once to float64 monomial
# coefficients; tests/sim/engines/test_transcendentals.py regenerates them and measures the error.
#
# exp: e^r = 1 + (r + r^2 Q(r)) on |r| <= ln2 / 2, Q the degree-9 interpolant of (e^r - 1 - r) / r^2
# (max relative error 2^-52, about float64's rounding; 1 + ... keeps exp(0) = 1 exactly).
EXP_Q = _hex("""
    0x1.0000000000001p-1 0x1.5555555555556p-3 0x1.5555555553d68p-5 0x1.11111111109b5p-7
    0x1.6c16c17889ef1p-10 0x1.a01a01a7c2efep-13 0x1.a019b9149a41cp-16 0x1.71de0db2f6b19p-19
    0x1.28917c89a43a7p-22 0x1.af389ecfc4b9cp-26
""")
# erf(x) = x P(x^2) for |x| < 1, P the degree-11 interpolant of erf(sqrt(u)) / sqrt(u) on u in [0, 1]
# (max relative error 2^-51.7).
ERF_P = _hex("""
    0x1.20dd750429b6dp+0 -0x1.812746b0379c1p-2 0x1.ce2f21a040f66p-4 -0x1.b82ce31203772p-6
    0x1.565bccfa44156p-8 -0x1.c02db0665e53dp-11 0x1.f9a2be4f731a1p-14 -0x1.f4ca838adb73bp-17
    0x1.b981d78881a5dp-20 -0x1.5c131500d3f88p-23 0x1.d76af6ca49787p-27 -0x1.ac9585a44fe29p-31
""")
# G(a) = e^(a^2) erfc(a) for a in [1, 11] (the tails: below 1 the series serves): (a + 3) G(a) = C(s),
# C the degree-16 interpolant in s, the linear map onto [-1, 1] of t = (a - 3) / (a + 3) (max relative
# error of G 2^-50.8). One interval: no per-element coefficient lookup, so the loops vectorize.
ERFC_K, ERFC_LO, ERFC_HI = 3.0, 1.0, 11.0
ERFC_C = _hex("""
    0x1.0b0ee4940e256p+0 -0x1.ce1e1609d40dfp-2 0x1.47e38e4a4abc0p-3 -0x1.71f3b1feab0f3p-5
    0x1.359c94e749726p-7 -0x1.3861c9ec8aaadp-10 -0x1.785939529f451p-17 0x1.305cf42b19c36p-15
    -0x1.1f354165e187fp-18 -0x1.cd3e29bac6d0dp-21 0x1.ed3a899f721b0p-23 0x1.9279193f8bea1p-26
    -0x1.72f7f762a1934p-27 -0x1.033adc73fca1ep-30 0x1.18f0ecba6a5d4p-31 0x1.902d32c3b3195p-35
    -0x1.6add0b43e6cf3p-36
""")
T_LO, T_HI = (ERFC_LO - ERFC_K) / (ERFC_LO + ERFC_K), (ERFC_HI - ERFC_K) / (ERFC_HI + ERFC_K)
T_MID, T_INV_HALF = (T_LO + T_HI) / 2, 2.0 / (T_HI - T_LO)
_ERF_ONE = 6.0  # erf(|x| >= 6) = +-1
_ERFC_TOP = ERFC_HI

# Evaluated as E(x^2) + x O(x^2) (even and odd coefficients): two independent Horner chains, so half
# the latency of one (without FMA each step is a multiply then an add).
_EXP_QE, _EXP_QO = EXP_Q[0::2].copy(), EXP_Q[1::2].copy()
_ERF_PE, _ERF_PO = ERF_P[0::2].copy(), ERF_P[1::2].copy()
_ERFC_CE, _ERFC_CO = ERFC_C[0::2].copy(), ERFC_C[1::2].copy()


# ---------------------------------------------------------------- Numba (scalar float64, inlined)

@njit(cache=True, inline="always")
def _even_odd(even, odd, x, x2):
    pe = even[even.size - 1]
    for i in range(even.size - 2, -1, -1):
        pe = pe * x2 + even[i]
    po = odd[odd.size - 1]
    for i in range(odd.size - 2, -1, -1):
        po = po * x2 + odd[i]
    return pe + x * po


@njit(cache=True, inline="always")
def exp64(x):
    xc = x if x > _EXP_LO else _EXP_LO  # NaN too: every lane computes finite values
    xc = xc if xc < _EXP_HI else _EXP_HI
    k = (xc * INV_LN2 + _ROUND_SHIFT) - _ROUND_SHIFT
    r = (xc - k * LN2_HI) - k * LN2_LO
    r2 = r * r
    p = 1.0 + (r + r2 * _even_odd(_EXP_QE, _EXP_QO, r, r2))
    y = p * f64_from_bits((np.int64(k) + 1023) << 52)
    if x > _EXP_HI:
        return np.inf
    if x < _EXP_LO:
        return 0.0
    return x if x != x else y


@njit(cache=True, inline="always")
def _erf_series(x):
    u = x * x
    return x * _even_odd(_ERF_PE, _ERF_PO, u, u * u)


@njit(cache=True, inline="always")
def _erfc_scaled(a):
    """``G(a) = exp(a^2) erfc(a)`` for ``1 <= a <= 11``."""
    # np.true_divide, not /: Numba's / checks for a zero divisor (Python's ZeroDivisionError), and
    # that branch keeps LLVM from vectorizing the loop; a + 3 > 0 here anyway.
    inv = np.true_divide(1.0, a + ERFC_K)
    s = ((a - ERFC_K) * inv - T_MID) * T_INV_HALF
    return _even_odd(_ERFC_CE, _ERFC_CO, s, s * s) * inv


@njit(cache=True, inline="always")
def erf_central(x):
    """``erf64(x)`` where ``|x| < CENTRAL_TOP``: the series."""
    return _erf_series(x)


@njit(cache=True, inline="always")
def erf_outer(x):
    """``erf64(x)`` elsewhere (NaN included): ``1 - e^(-x^2) G(|x|)``, or +-1."""
    a = abs(x)
    ac = a if a < _ERFC_TOP else _ERFC_TOP
    tail = 1.0 - exp64(-(x * x)) * _erfc_scaled(ac)
    big = tail if x > 0 else -tail
    one = 1.0 if x > 0 else -1.0
    y = big if a < _ERF_ONE else one
    return x if x != x else y


@njit(cache=True, inline="always")
def erf64(x):
    # Both candidates are computed, then one is picked: a select, not a branch, so loops vectorize.
    return erf_central(x) if abs(x) < CENTRAL_TOP else erf_outer(x)


@njit(cache=True, inline="always")
def gelu_central(x):
    """``gelu64(x)`` where ``|x * INV_SQRT2| < CENTRAL_TOP``: ``x Phi(x)`` by the series."""
    return x * (0.5 + 0.5 * _erf_series(x * INV_SQRT2))


@njit(cache=True, inline="always")
def gelu_outer(x):
    """``gelu64(x)`` elsewhere (NaN and infinities included): ``x Phi(x)`` from ``Q``."""
    a = abs(x * INV_SQRT2)
    ac = a if a < _ERFC_TOP else _ERFC_TOP
    q = 0.5 * exp64((-0.5 * x) * x) * _erfc_scaled(ac)
    q = q if a < _ERFC_TOP else 0.0
    y = x * (1.0 - q if x > 0 else q)
    y = 0.0 if x == -np.inf else y  # the limit; x * Phi(x) would be -inf * 0
    return x if x != x else y


@njit(cache=True, inline="always")
def gelu64(x):
    return gelu_central(x) if abs(x * INV_SQRT2) < CENTRAL_TOP else gelu_outer(x)


@njit(cache=True, inline="always")
def gelu_dx_central(x):
    """``gelu_dx64(x)`` where ``|x * INV_SQRT2| < CENTRAL_TOP``: Phi by the series."""
    e = exp64((-0.5 * x) * x)
    return (0.5 + 0.5 * _erf_series(x * INV_SQRT2)) + x * (e * INV_SQRT_2PI)


@njit(cache=True, inline="always")
def gelu_dx_outer(x):
    """``gelu_dx64(x)`` elsewhere (NaN and infinities included): Phi from ``Q``."""
    a = abs(x * INV_SQRT2)
    e = exp64((-0.5 * x) * x)
    q = 0.5 * e * _erfc_scaled(a if a < _ERFC_TOP else _ERFC_TOP)
    q = q if a < _ERFC_TOP else 0.0
    y = (1.0 - q if x > 0 else q) + x * (e * INV_SQRT_2PI)
    y = (1.0 if x > 0 else 0.0) if a == np.inf else y  # the limits (x * e would be inf * 0)
    return x if x != x else y


@njit(cache=True, inline="always")
def gelu_dx64(x):
    return gelu_dx_central(x) if abs(x * INV_SQRT2) < CENTRAL_TOP else gelu_dx_outer(x)


# ---------------------------------------------------------------- numpy twins (float64 arrays)

def _even_odd_np(even: np.ndarray, odd: np.ndarray, x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    pe = np.full_like(x, even[-1])
    for c in even[-2::-1]:
        pe = pe * x2 + c
    po = np.full_like(x, odd[-1])
    for c in odd[-2::-1]:
        po = po * x2 + c
    return pe + x * po


def exp_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        xc = np.where(x > _EXP_LO, x, _EXP_LO)
        xc = np.where(xc < _EXP_HI, xc, _EXP_HI)
        k = (xc * INV_LN2 + _ROUND_SHIFT) - _ROUND_SHIFT
        r = (xc - k * LN2_HI) - k * LN2_LO
        r2 = r * r
        p = 1.0 + (r + r2 * _even_odd_np(_EXP_QE, _EXP_QO, r, r2))
        y = p * ((k.astype(np.int64) + 1023) << 52).view(np.float64)
        y = np.where(x > _EXP_HI, np.inf, np.where(x < _EXP_LO, 0.0, y))
        return np.where(np.isnan(x), x, y)


def _erf_series_np(x: np.ndarray) -> np.ndarray:
    u = x * x
    return x * _even_odd_np(_ERF_PE, _ERF_PO, u, u * u)


def _erfc_scaled_np(a: np.ndarray) -> np.ndarray:
    inv = 1.0 / (a + ERFC_K)
    s = ((a - ERFC_K) * inv - T_MID) * T_INV_HALF
    return _even_odd_np(_ERFC_CE, _ERFC_CO, s, s * s) * inv


def _erf_outer_np(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    tail = 1.0 - exp_np(-(x * x)) * _erfc_scaled_np(np.where(a < _ERFC_TOP, a, _ERFC_TOP))
    big = np.where(x > 0, tail, -tail)
    y = np.where(a < _ERF_ONE, big, np.where(x > 0, 1.0, -1.0))
    return np.where(np.isnan(x), x, y)


def erf_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(np.abs(x) < CENTRAL_TOP, _erf_series_np(x), _erf_outer_np(x))


def _gelu_central_np(x: np.ndarray) -> np.ndarray:
    return x * (0.5 + 0.5 * _erf_series_np(x * INV_SQRT2))


def _gelu_outer_np(x: np.ndarray) -> np.ndarray:
    a = np.abs(x * INV_SQRT2)
    q = 0.5 * exp_np((-0.5 * x) * x) * _erfc_scaled_np(np.where(a < _ERFC_TOP, a, _ERFC_TOP))
    q = np.where(a < _ERFC_TOP, q, 0.0)
    y = np.where(x == -np.inf, 0.0, x * np.where(x > 0, 1.0 - q, q))
    return np.where(np.isnan(x), x, y)


def gelu_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(np.abs(x * INV_SQRT2) < CENTRAL_TOP, _gelu_central_np(x), _gelu_outer_np(x))


def _gelu_dx_central_np(x: np.ndarray) -> np.ndarray:
    e = exp_np((-0.5 * x) * x)
    return (0.5 + 0.5 * _erf_series_np(x * INV_SQRT2)) + x * (e * INV_SQRT_2PI)


def _gelu_dx_outer_np(x: np.ndarray) -> np.ndarray:
    a = np.abs(x * INV_SQRT2)
    e = exp_np((-0.5 * x) * x)
    q = 0.5 * e * _erfc_scaled_np(np.where(a < _ERFC_TOP, a, _ERFC_TOP))
    q = np.where(a < _ERFC_TOP, q, 0.0)
    y = np.where(x > 0, 1.0 - q, q) + x * (e * INV_SQRT_2PI)
    y = np.where(a == np.inf, np.where(x > 0, 1.0, 0.0), y)
    return np.where(np.isnan(x), x, y)


def gelu_dx_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(np.abs(x * INV_SQRT2) < CENTRAL_TOP, _gelu_dx_central_np(x), _gelu_dx_outer_np(x))
