"""Rounding on VectorE, and the divisions built on it: ``trunc``, ``floor``, ``ceil``, ``frac``,
``round`` (half to even), ``div(rounding_mode="trunc" | "floor")``, ``floor_divide`` and
``remainder``; with them ``isnan`` and ``deg2rad``/``rad2deg``.

There is no rounding instruction: every fp32 of magnitude 2**23 or more is an integer, and below it
``x - fmod(x, 1)`` is ``trunc(x)`` exactly (VectorE's ``mod`` is C's ``fmod``, exact). ``floor``
and ``ceil`` correct the truncation by one where it moved the wrong way; ``round`` is the classic
``(|x| + 2**23) - 2**23``, whose fp32 addition rounds half to even, given ``x``'s sign back.
inf and NaN pass through (the ``|x| < 2**23`` select keeps ``x``).

The divisions follow ATen-CPU's scalar formulas step for step (``c10::div_floor_floating``: the
quotient of ``a - fmod(a, b)``, corrected by one where the remainder's sign differs from ``b``'s,
then floored and nudged as ATen does; ``remainder`` adds ``b`` to such an ``fmod``), in fp32 with
one rounding to the output dtype. Integer operands take the same fp32 path, which is exact while
every value is below 2**24 in magnitude (a per-call check; other calls, and division by zero,
which ATen raises on, run on the host); int64 values are computed in 32 bits under the device's
64-bit policy.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import _base, _floats, _other, launch_on, op_names
from neuronsim.kernels.elementwise_chains import _tmp, alu, alu2
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
TWO23 = float(2**23)  # from here up every fp32 is an integer
EXACT_INT = 2**24  # integers below this are exact in fp32
INTS = (torch.int32, torch.int64)


# ---------------------------------------------------------------- tile computations


def _mask(x):
    return nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)


def _small(x):
    """``|x| < 2**23`` (False for inf and NaN)."""
    m = _mask(x)
    nisa.tensor_scalar(dst=m, data=x, op0=A.abs_max, operand0=0.0, op1=A.less, operand1=TWO23)
    return m


def trunc(dst, x):
    f = _tmp(x)
    alu(f, x, A.mod, 1.0)
    t = _tmp(x)
    alu2(t, x, f, A.subtract)
    nisa.select_reduce(dst=dst, predicate=_small(x), on_true=t, on_false=x)


def _corrected(dst, x, op, correction):
    """``trunc(x) op (x correction trunc(x))``: floor subtracts 1 where x < trunc(x), ceil adds it."""
    t = _tmp(x)
    trunc(t, x)
    off = _tmp(x)
    alu2(off, x, t, correction)
    alu2(dst, t, off, op)


def floor(dst, x):
    _corrected(dst, x, A.subtract, A.less)


def ceil(dst, x):
    _corrected(dst, x, A.add, A.greater)


def frac(dst, x):  # ATen's x - trunc(x) (inf gives NaN)
    t = _tmp(x)
    trunc(t, x)
    alu2(dst, x, t, A.subtract)


def round_half_even(dst, x):
    a = _tmp(x)
    alu(a, x, A.abs_max, 0.0, A.add, TWO23)  # |x| + 2**23, rounded to an integer (ties to even)
    alu(a, a, A.subtract, TWO23)
    s = _tmp(x)
    alu(s, x, A.less, 0.0, A.multiply, -2.0)  # -2 where x < 0
    alu(s, s, A.add, 1.0)  # the sign, -1 or 1 (-0.0 stays signed: round(-0.4) is -0.0)
    alu2(a, a, s, A.multiply)
    nisa.select_reduce(dst=dst, predicate=_small(x), on_true=a, on_false=x)


def _like(x):
    """A scratch tile in ``x``'s float dtype: ATen's 16-bit division kernels round every
    intermediate to the 16-bit type (``c10::BFloat16`` arithmetic); integers compute in fp32."""
    dtype = x.dtype if x.dtype in (nl.float32, nl.bfloat16, nl.float16) else F32
    return nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)


def _operand(x, b):
    """``b`` as a tile of ``x``'s shape (a trace-time constant becomes a filled fp32 tile)."""
    return nl.full(x.shape, b, dtype=F32) if isinstance(b, float) else b


def _wrong_sign(dst, mod, b):
    """1.0 where ``mod != 0`` and its sign differs from ``b``'s (ATen's correction), else 0.0."""
    bneg, mneg = _tmp(mod), _tmp(mod)
    alu(bneg, b, A.less, 0.0)
    alu(mneg, mod, A.less, 0.0)
    alu2(bneg, bneg, mneg, A.not_equal)
    alu(mneg, mod, A.not_equal, 0.0)
    alu2(dst, bneg, mneg, A.logical_and)


def div_trunc(dst, a, b=None, *, value=None):
    b = _operand(a, value if b is None else b)
    q = _like(a)
    alu2(q, a, b, A.divide)
    trunc(dst, q)


def div_floor(dst, a, b=None, *, value=None):
    """``c10::div_floor_floating``."""
    b = _operand(a, value if b is None else b)
    mod, div, adj = _like(a), _like(a), _like(a)
    alu2(mod, a, b, A.mod)
    alu2(div, a, mod, A.subtract)
    alu2(div, div, b, A.divide)
    _wrong_sign(adj, mod, b)
    alu2(div, div, adj, A.subtract)
    fl = _like(a)
    floor(fl, div)
    alu2(adj, div, fl, A.subtract)
    alu(adj, adj, A.greater, 0.5)
    alu2(fl, fl, adj, A.add)  # (a quotient of 0 keeps ATen's sign only as -0.0 vs 0.0)
    by_zero, q = _mask(a), _like(a)
    alu(by_zero, b, A.equal, 0.0)
    alu2(q, a, b, A.divide)  # IEEE's a / 0
    nisa.select_reduce(dst=dst, predicate=by_zero, on_true=q, on_false=fl)


def remainder(dst, a, b=None, *, value=None):
    """ATen's ``fmod(a, b)``, plus ``b`` where its sign differs from ``b``'s."""
    b = _operand(a, value if b is None else b)
    mod, adj = _like(a), _like(a)
    alu2(mod, a, b, A.mod)
    _wrong_sign(adj, mod, b)
    alu2(adj, adj, b, A.multiply)
    alu2(dst, mod, adj, A.add)


def isnan(dst, x):
    alu2(dst, x, x, A.not_equal)


# ---------------------------------------------------------------- planners


_UNARY = {"trunc": trunc, "fix": trunc, "floor": floor, "ceil": ceil, "frac": frac, "round": round_half_even}


@native(*op_names(_UNARY))
def plan_rounding(call: Call) -> Launch | None:
    if not _floats(call) or len(call.inputs) != 1:
        return None
    return launch_on(call, (OUT(0), IN(0)), _UNARY[_base(call).rstrip("_")])


_ANGLES = {"deg2rad": math.pi / 180.0, "rad2deg": 180.0 / math.pi}


@native(*op_names(_ANGLES))
def plan_angle(call: Call) -> Launch | None:
    """``x * c`` with ATen's constant rounded to fp32, as its scalar multiply does."""
    if not _floats(call) or len(call.inputs) != 1:
        return None
    factor = float(np.float32(_ANGLES[_base(call).rstrip("_")]))
    return launch_on(call, (OUT(0), IN(0)), alu, op0=A.multiply, v0=factor)


@native("aten::isnan.default")
def plan_isnan(call: Call) -> Launch | None:
    if call.inputs[0].dtype not in FLOAT_DTYPES or call.outputs[0].dtype is not torch.bool:
        return None
    return launch_on(call, (OUT(0), IN(0)), isnan)


def _exact_ints(n: int, divisor: int | None):
    """The per-call check of integer operands: every value below 2**24 in magnitude, and no zero
    divisor (``divisor``: the input index of a tensor divisor)."""
    def admit(inputs) -> bool:
        for i in range(n):
            v = inputs[i]
            if v.numel() and int(v.abs().max()) >= EXACT_INT:
                return False
        return divisor is None or bool((inputs[divisor] != 0).all())
    return admit


def _division(call: Call, compute):
    """The Launch of a binary rounding division ``compute`` (``a op b``, ``b`` a device tensor or
    a number), or None."""
    tensor, value = _other(call)
    x = call.inputs[0]
    out = call.outputs[0]
    if tensor is None and value is None:
        return None
    if _floats(call):
        if tensor is not None:
            return launch_on(call, (OUT(0), IN(0), IN(1)), compute)
        return launch_on(call, (OUT(0), IN(0)), compute, value=float(np.float32(value)))
    dtypes = {t.dtype for t in (*call.inputs, *call.outputs)}
    if len(dtypes) != 1 or x.dtype not in INTS:
        return None
    if tensor is not None:
        launch = launch_on(call, (OUT(0), IN(0), IN(1)), compute)
        admit = _exact_ints(2, 1)
    else:
        if not isinstance(value, int) or value == 0 or abs(value) >= EXACT_INT:
            return None
        launch = launch_on(call, (OUT(0), IN(0)), compute, value=float(value))
        admit = _exact_ints(1, None)
    if out.dtype not in INTS:
        return None
    return Launch(launch.body, launch.operands, launch.statics, admit=admit,
                  int64_in_32_bits=launch.int64_in_32_bits)


@native(*op_names(["div"], ("Tensor_mode", "Scalar_mode")))
def plan_div_mode(call: Call) -> Launch | None:
    mode = call.kwargs.get("rounding_mode", call.args[2] if len(call.args) > 2 else None)
    if mode not in ("trunc", "floor"):
        return None
    if mode == "trunc" and not _floats(call):
        return None  # integer trunc division: C's, not this fp32 path's concern
    return _division(call, div_trunc if mode == "trunc" else div_floor)


@native(*op_names(["floor_divide"], ("default", "Tensor", "Scalar")))
def plan_floor_divide(call: Call) -> Launch | None:
    return _division(call, div_floor)


@native(*op_names(["remainder"], ("Tensor", "Scalar")))
def plan_remainder(call: Call) -> Launch | None:
    return _division(call, remainder)

