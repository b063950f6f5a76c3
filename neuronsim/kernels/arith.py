"""Arithmetic, comparisons, logic, bit operators and fills: ``add``, ``sub``, ``mul``, ``div``,
``rsub``, ``maximum``, ``minimum``, ``pow``, ``fmod``, ``eq`` .. ``ge``, ``logical_*``,
``bitwise_*``, ``neg``, ``abs``, ``fill_``, ``zero_`` — each in its functional, in-place and Scalar
forms — as chains on ``elementwise.py``'s tile loop.

Floats compute in fp32 and round once; int32 (and int64, as its low words under the device's 64-bit
policy: see ``elementwise.py``) is exact on GpSimd's integer ALU; bit operators run on VectorE on any
integer dtype. A signature whose semantics a chain does not reproduce (a rounding mode, an int alpha
on floats, mixed integer widths, a scalar out of int32 range on an int64 tensor...) gets ``None``
and runs on the host.
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import (
    BIT_DTYPES,
    INT32,
    SMALL_INTS,
    A,
    Tensor,
    _all,
    _as_dtype,
    _base,
    _floats,
    _int32,
    _launch,
    _scalar,
    alu,
    alu2,
    bits,
    fill,
    int_binary,
    int_unary,
    launch_on,
    op_names,
    plan_unary,
)
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native

INTEGERS = (*BIT_DTYPES, torch.int64)


_ARITH = {"add": A.add, "sub": A.subtract, "mul": A.multiply, "div": A.divide, "rsub": A.subtract,
          "maximum": A.maximum, "minimum": A.minimum, "pow": A.power, "fmod": A.mod}
_COMPARE = {"eq": A.equal, "ne": A.not_equal, "lt": A.less, "le": A.less_equal, "gt": A.greater,
            "ge": A.greater_equal}
_LOGICAL = {"logical_and": A.logical_and, "logical_or": A.logical_or, "logical_xor": A.logical_xor}
_BITWISE = {"bitwise_and": A.bitwise_and, "bitwise_or": A.bitwise_or, "bitwise_xor": A.bitwise_xor}
_INT_EXACT = {"add", "sub", "mul", "rsub", "maximum", "minimum"}  # GpSimd's native int32 operators


def _other(call: Call):
    """(device tensor or None, scalar or None) for the second operand."""
    if call.arg(0, "self") is not call.inputs[0]:  # a Python scalar ``self`` (rsub's decomposition)
        return None, None
    name = "exponent" if _base(call).startswith("pow") else "other"
    other = call.arg(1, name)
    if isinstance(other, Tensor) and not other.is_cpu:
        return other, None
    return None, _scalar(other)


@native(*(n for n in op_names(_ARITH, ("Tensor", "Scalar", "Tensor_Tensor", "Tensor_Scalar", "default"))
          if n != "aten::pow.Scalar"))  # pow.Scalar's base is the scalar
def plan_arith(call: Call) -> Launch | None:
    base = _base(call).rstrip("_")
    op = _ARITH[base]
    tensor, value = _other(call)
    alpha = _scalar(call.arg(2, "alpha", 1)) if base in ("add", "sub", "rsub") else 1
    if base == "sub" and len(call.inputs) == 1 and call.arg(1, "other") is call.inputs[0]:
        s = _scalar(call.arg(0, "self"))  # s - alpha * x (what rsub with a scalar becomes)
        if s is None or alpha is None or not _floats(call):
            return None
        return _launch(call, alu, op0=A.multiply, v0=-float(alpha), op1=A.add, v1=float(s))
    if tensor is None and value is None:
        return None
    if alpha is None or (base == "div" and call.kwargs.get("rounding_mode") is not None):
        return None
    if _all(call, INT32):
        return _plan_int_arith(call, base, op, tensor, value, alpha)
    if not _floats(call):
        return None
    alpha = float(alpha)
    if tensor is not None:
        if base == "sub":
            op, alpha = (A.subtract, 1.0) if alpha == 1.0 else (A.add, -alpha)
        if base == "rsub":  # other - alpha * self
            if alpha == 1.0:
                return launch_on(call, (OUT(0), IN(1), IN(0)), alu2, op=op)
            return launch_on(call, (OUT(0), IN(1), IN(0)), _rsub_alpha, alpha=alpha)
        return _launch(call, alu2, op=op, alpha=alpha)
    value = float(value)
    if base in ("add", "sub"):  # a +- alpha * s: one add of a constant
        return _launch(call, alu, op0=A.add, v0=value * alpha if base == "add" else -value * alpha)
    if base == "rsub":  # s - alpha * a
        return _launch(call, alu, op0=A.multiply, v0=-alpha, op1=A.add, v1=value)
    return _launch(call, alu, op0=op, v0=value)


def _rsub_alpha(dst, other, x, alpha):  # other - alpha * x, as (x * -alpha) + other
    nisa.scalar_tensor_tensor(dst=dst, data=x, op0=A.multiply, operand0=-alpha, op1=A.add, operand1=other)


def _plan_int_arith(call, base, op, tensor, value, alpha) -> Launch | None:
    if base not in _INT_EXACT or not _int32(alpha) or (value is not None and not _int32(value)):
        return None
    if base == "rsub":
        if tensor is None:  # s - a (an int alpha other than 1 would need one more instruction)
            return _launch(call, int_unary, n_inputs=1, op=A.subtract, value=value, reverse=True) \
                if alpha == 1 else None
        return launch_on(call, (OUT(0), IN(1), IN(0)), int_binary, op=A.subtract, alpha=alpha)
    if tensor is None:
        if alpha != 1:
            return None
        return _launch(call, int_binary, n_inputs=1, op=op, value=value)
    return _launch(call, int_binary, op=op, alpha=alpha)


@native(*op_names(_COMPARE, ("Tensor", "Scalar")), *op_names(_LOGICAL))
def plan_compare(call: Call) -> Launch | None:
    base = _base(call).rstrip("_")
    op = _COMPARE.get(base) or _LOGICAL[base]
    tensor, value = _other(call)
    if tensor is None and value is None:
        return None
    dtypes = {t.dtype for t in call.inputs}
    out = call.outputs[0].dtype
    if dtypes <= set(INT32) and out in (*INT32, torch.bool) and (value is None or _int32(value)):
        return _launch(call, int_binary, op=op, value=value)
    # fp32 path: exact for floats and small ints; logic only asks "nonzero", which fp32 keeps for int32.
    exact = dtypes <= {*FLOAT_DTYPES, *SMALL_INTS} or (op in _LOGICAL.values() and bool(dtypes & set(INT32)))
    if not exact or (out not in FLOAT_DTYPES and out is not torch.bool):
        return None
    if tensor is not None:
        common = torch.promote_types(*dtypes) if len(dtypes) == 2 else dtypes.pop()
        if base in _COMPARE and common in (torch.bfloat16, torch.float16) and not dtypes <= {
                common, torch.bool, torch.int8, torch.uint8}:
            return None  # ATen compares after rounding an int16 (or fp32) operand to the 16-bit type
        return _launch(call, alu2, op=op)
    common = torch.result_type(call.inputs[0], value)
    if common in FLOAT_DTYPES:
        return _launch(call, alu, op0=op, v0=_as_dtype(value, common))
    if not isinstance(value, int) or not torch.iinfo(common).min <= value <= torch.iinfo(common).max:
        return None
    return _launch(call, alu, op0=op, v0=float(value))


@native("aten::logical_not.default", "aten::logical_not_.default")
def plan_logical_not(call: Call) -> Launch | None:
    if not _all(call, (*FLOAT_DTYPES, *INTEGERS)):
        return None
    return _launch(call, alu, op0=A.equal, v0=0.0)


@native(*op_names(_BITWISE, ("Tensor", "Scalar")))
def plan_bitwise(call: Call) -> Launch | None:
    op = _BITWISE[_base(call).rstrip("_")]
    tensor, value = _other(call)
    if not _all(call, INTEGERS) or not _same_width(call):
        return None
    if tensor is not None:
        return _launch(call, bits, op=op)
    if not isinstance(value, int):
        return None
    return _launch(call, bits, op=op, value=value)


@native("aten::bitwise_not.default", "aten::bitwise_not_.default")
def plan_bitwise_not(call: Call) -> Launch | None:
    if len({t.dtype for t in (*call.inputs, *call.outputs)}) != 1 or not _all(call, INTEGERS):
        return None
    if call.inputs[0].dtype is torch.bool:  # ~True is False: xor with 1 on the one-bit type
        return _launch(call, bits, op=A.bitwise_xor, value=1)
    return _launch(call, bits, op=A.invert, value=0)


@native("aten::neg.default", "aten::neg_.default", "aten::abs.default", "aten::abs_.default")
def plan_neg_abs(call: Call) -> Launch | None:
    base = _base(call).rstrip("_")
    if _all(call, INT32):
        if base == "neg":
            return _launch(call, int_unary, op=A.subtract, value=0, reverse=True)
        return _launch(call, int_unary, op=A.abs_max, value=0)
    return plan_unary(call)


# ---------------------------------------------------------------- fills


@native("aten::fill_.Scalar", "aten::zero_.default")
def plan_fill(call: Call) -> Launch | None:
    value = 0 if _base(call) == "zero_" else _scalar(call.arg(1, "value"))
    dtype = call.inputs[0].dtype
    if value is None or dtype not in (*FLOAT_DTYPES, *INTEGERS):
        return None
    if dtype is torch.bool:
        value = float(value != 0)
    elif dtype in FLOAT_DTYPES:
        if isinstance(value, float) and dtype is not torch.float32 and _as_dtype(value, dtype) != _as_dtype(
                _as_dtype(value, torch.float32), dtype):
            return None  # memset rounds through fp32: a double rounding ATen does not do
    else:
        info = torch.iinfo(torch.int32 if dtype is torch.int64 else dtype)  # int64: its low words
        if isinstance(value, float) and value.is_integer():  # torch.ones(dtype=torch.long) fills 1.0
            value = int(value)
        if not isinstance(value, int) or not info.min <= value <= info.max:
            return None
    return _launch(call, fill, n_inputs=0, value=float(value))


def _same_width(call: Call) -> bool:
    """One integer dtype, or bool operands with an int32/int64 result (``ids & mask``: bool is 0/1 in
    any width, so the result's low word is the int32 operator's)."""
    dtypes = {t.dtype for t in (*call.inputs, *call.outputs)}
    return len(dtypes) == 1 or (dtypes - {torch.bool} <= set(INT32) and call.outputs[0].dtype in INT32)
