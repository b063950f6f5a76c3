"""Element-wise ops: arithmetic, comparisons, logic, bit operators, activations and their backward
passes, clamps and fills, each in its functional, in-place and Scalar forms where ATen has them.

Every kernel is the same tile loop: each operand's tile is loaded by DMA (broadcasting through
stride-0 access patterns), a short chain of engine instructions computes the output tile, DMA
stores it. The chains use the engines as the hardware does:

- ScalarE ``activation`` for transcendental functions (``func(x * scale + bias)``: exp, log, tanh,
  sigmoid, erf, sin, sqrt, ...); VectorE ``tensor_tensor`` / ``tensor_scalar`` /
  ``scalar_tensor_tensor`` for arithmetic, min/max, comparisons (1.0/0.0, stored as bool) and logic;
  ``tensor_copy_predicated`` where ATen selects (threshold); ``memset`` for fills.
- Floats (float32, bfloat16, float16): the engines compute in fp32 and round once on the write, as
  ATen-CPU's opmath does for the 16-bit types; intermediates of a chain stay fp32.
- int32: exact integer arithmetic, min/max, comparisons and logic on GpSimd (``tensor_tensor`` with
  every tile int32; a scalar operand is a memset int32 tile). Bit operators run on VectorE on any
  integer dtype (bool, int8, uint8, int16, int32).
- int64 has no NeuronCore dtype: under the device's 64-bit policy it computes in 32 bits, as the
  host does when it narrows (``device/dtype_policy.py``). An int64 operand is its (low, high) int32
  words (``bridge.py``): the tile loop reads the low words — the int32 the host's narrowing gives —
  and writes an int64 result as the int32 result and its sign (``>> 31`` on VectorE), the host's
  widening back. So int64 ops run the int32 chains, with the host's semantics bit for bit (a scalar
  outside int32 falls back).

A signature whose semantics a chain does not reproduce (an rounding mode, an int alpha on floats,
mixed integer widths, ...) gets ``None`` from its planner and runs on the host.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise_chains import (
    act,
    act_then,
    alu,
    alu2,
    bits,
    clamp2,
    elu,
    fill,
    gelu_backward,
    gelu_tanh_backward,
    hardsigmoid,
    hardswish,
    hardtanh_backward,
    int_binary,
    int_clamp,
    int_sign,
    int_unary,
    leaky_relu,
    leaky_relu_backward,
    mish,
    sigmoid_backward,
    sign,
    silu_backward,
    tanh_backward,
    threshold,
    threshold_backward,
)
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

Tensor = torch.Tensor
A = AluOp
F32 = nl.float32
SMALL_INTS = (torch.bool, torch.int8, torch.uint8, torch.int16)  # exact as fp32
BIT_DTYPES = (*SMALL_INTS, torch.int32)
INT32 = (torch.int32, torch.int64)  # computed as int32 on GpSimd (int64: the 64-bit policy)
INTEGERS = (*BIT_DTYPES, torch.int64)


# ---------------------------------------------------------------- the kernel and its tile loop


def tile_loop(out, ins, compute, wide=()):
    """For every tile: load ``ins`` (broadcast to ``out``), ``compute(dst, *loaded)``, store.
    ``wide[k]``: view ``k`` (``out`` first) is an int64 tensor's words (see the module doc)."""
    wide = tuple(wide) or (False,) * (1 + len(ins))
    target = low_words(out) if wide[0] else out
    views = [target, *((low_words(v) if w else v).broadcast_to(target.shape)
                       for v, w in zip(ins, wide[1:], strict=True))]
    tiles = elementwise_tiles(views)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        loaded = []
        for k, v in enumerate(views[1:], start=1):
            t = nl.ndarray(shape, dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(k, v))
            loaded.append(t)
        result = nl.ndarray(shape, dtype=target.dtype, buffer=nl.sbuf)
        compute(result, *loaded)
        nisa.dma_copy(dst=tile.of(0, target), src=result)
        if wide[0]:
            sign = nl.ndarray(shape, dtype=nl.int32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=sign, data=result, op0=A.right_shift, operand0=31,
                               engine=nisa.vector_engine)
            nisa.dma_copy(dst=tile.of(0, high_words(out)), src=sign)


def low_words(view):
    """The low int32 words of an int64 operand's HBM view (shape ``[..., 2]``, little-endian)."""
    return view.ap([list(d) for d in view.dims[:-1]] or [[1, 1]], offset=view.offset)


def high_words(view):
    return view.ap([list(d) for d in view.dims[:-1]] or [[1, 1]], offset=view.offset + 1)


def elementwise(out, *ins, compute, params, wide=()):
    """The element-wise kernel: ``compute(dst_tile, *input_tiles, **params)`` per tile."""
    tile_loop(out, list(ins), lambda dst, *xs: compute(dst, *xs, **params), wide)


# ---------------------------------------------------------------- planner helpers


def _base(call: Call) -> str:
    return call.op.name().removeprefix("aten::").split(".")[0]


def _scalar(x) -> float | int | None:
    """A Python number or 0-dim CPU tensor (trace-time constant); None otherwise."""
    if isinstance(x, Tensor):
        if not (x.is_cpu and x.dim() == 0):
            return None
        x = x.item()
    if isinstance(x, bool):
        return int(x)
    return x if isinstance(x, int | float) else None


def _floats(call: Call) -> bool:
    return all(t.dtype in FLOAT_DTYPES for t in (*call.inputs, *call.outputs))


def _all(call: Call, dtypes) -> bool:
    return all(t.dtype in dtypes for t in (*call.inputs, *call.outputs))


def _as_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype``, as ATen casts a comparison's or clamp's scalar."""
    return float(torch.tensor(value, dtype=torch.float64).to(dtype).item())


def _int32(v) -> bool:
    return isinstance(v, int) and -(2**31) <= v < 2**31


def _launch(call: Call, compute, n_inputs: int | None = None, **params) -> Launch:
    n = len(call.inputs) if n_inputs is None else n_inputs
    return launch_on(call, (OUT(0), *(IN(i) for i in range(n))), compute, **params)


def launch_on(call: Call, operands, compute, **params) -> Launch:
    """The element-wise kernel on ``operands`` (the output first), its int64 operands marked wide."""
    tensors = [(call.outputs if r.role == "out" else call.inputs)[r.index] for r in operands]
    statics = {"compute": compute, "params": params}
    wide = tuple(t.dtype is torch.int64 for t in tensors)
    if any(wide):
        statics["wide"] = wide
    return Launch(elementwise, tuple(operands), statics, int64_in_32_bits=any(wide))


def op_names(bases, overloads=("default",), inplace=True) -> list[str]:
    """The ATen op names among ``base[_].overload`` that exist and take a tensor (``add.default``
    is ``Scalar + Scalar``: no device tensor ever reaches it)."""
    found = []
    for base in bases:
        for b in (base, f"{base}_") if inplace else (base,):
            packet = getattr(torch.ops.aten, b, None)
            for ov in overloads:
                if packet is not None and ov in packet.overloads() and _takes_tensors(getattr(packet, ov)):
                    found.append(f"aten::{b}.{ov}")
    return found


def _takes_tensors(op) -> bool:
    return any("Tensor" in str(a.type) for a in op._schema.arguments)


# ---------------------------------------------------------------- unary float ops


_LN2 = math.log(2.0)
_UNARY = {  # base -> (compute, params)
    "exp": (act, {"func": ActFunc.exp}),
    "exp2": (act, {"func": ActFunc.exp, "scale": _LN2}),
    "log": (act, {"func": ActFunc.log}),
    "log2": (act_then, {"func": ActFunc.log, "op": A.multiply, "value": 1.0 / _LN2}),
    "log10": (act_then, {"func": ActFunc.log, "op": A.multiply, "value": 1.0 / math.log(10.0)}),
    "tanh": (act, {"func": ActFunc.tanh}),
    "sigmoid": (act, {"func": ActFunc.sigmoid}),
    "relu": (act, {"func": ActFunc.relu}),
    "silu": (act, {"func": ActFunc.silu}),
    "erf": (act, {"func": ActFunc.erf}),
    "sin": (act, {"func": ActFunc.sin}),
    "cos": (act, {"func": ActFunc.sin, "bias": math.pi / 2}),  # cos x = sin(x + pi/2)
    "sqrt": (act, {"func": ActFunc.sqrt}),
    "rsqrt": (act, {"func": ActFunc.rsqrt}),
    "reciprocal": (alu, {"op0": A.reciprocal}),  # VectorE: ScalarE's "+ bias" would turn -0.0 into 0.0
    "abs": (act, {"func": ActFunc.abs}),
    "neg": (act, {"func": ActFunc.copy, "scale": -1.0}),
    "sign": (sign, {}),
    "sgn": (sign, {}),
    "mish": (mish, {}),
    "hardsigmoid": (hardsigmoid, {}),
    "hardswish": (hardswish, {}),
}


@native(*op_names(k for k in _UNARY if k not in ("neg", "abs")))  # neg, abs: see plan_neg_abs
def plan_unary(call: Call) -> Launch | None:
    if _base(call).rstrip("_") in ("sign", "sgn") and _all(call, INT32) and len(call.inputs) == 1:
        return _launch(call, int_sign)
    if not _floats(call) or len(call.inputs) != 1:
        return None
    compute, params = _UNARY[_base(call).rstrip("_")]
    return _launch(call, compute, **params)


@native(*op_names(["gelu"]))
def plan_gelu(call: Call) -> Launch | None:
    if not _floats(call):
        return None
    func = ActFunc.gelu if call.arg(1, "approximate", "none") == "none" else ActFunc.gelu_apprx_tanh
    return _launch(call, act, func=func)


@native("aten::softplus.default")
def plan_softplus(call: Call) -> Launch | None:
    beta, th = _scalar(call.arg(1, "beta", 1)), _scalar(call.arg(2, "threshold", 20))
    # Past the threshold ATen returns x; log1p(exp(b x)) / b differs from x by < e^-th / th relative.
    if not _floats(call) or beta is None or th is None or beta <= 0 or th < 12:
        return None
    if beta == 1:
        return _launch(call, act, func=ActFunc.softplus)
    return _launch(call, act_then, func=ActFunc.softplus, scale=float(beta), op=A.divide, value=float(beta))


@native(*op_names(["leaky_relu"]))
def plan_leaky_relu(call: Call) -> Launch | None:
    slope = _scalar(call.arg(1, "negative_slope", 0.01))
    if not _floats(call) or slope is None:
        return None
    return _launch(call, leaky_relu, slope=float(slope))


@native(*op_names(["elu"]))
def plan_elu(call: Call) -> Launch | None:
    alpha, scale, in_scale = (_scalar(call.arg(i, n, 1)) for i, n in
                              ((1, "alpha"), (2, "scale"), (3, "input_scale")))
    if not _floats(call) or None in (alpha, scale, in_scale) or in_scale <= 0:
        return None
    return _launch(call, elu, alpha=float(alpha), scale=float(scale), input_scale=float(in_scale))


@native(*op_names(["threshold"]))
def plan_threshold(call: Call) -> Launch | None:
    th, value = _scalar(call.arg(1, "threshold")), _scalar(call.arg(2, "value"))
    if not _floats(call) or th is None or value is None:
        return None
    dtype = call.inputs[0].dtype
    return _launch(call, threshold, th=_as_dtype(th, dtype), value=float(value))


@native(*op_names(["hardtanh"]), *op_names(["clamp", "clamp_min", "clamp_max"]))
def plan_clamp_scalar(call: Call) -> Launch | None:
    base = _base(call).rstrip("_")
    dtype = call.inputs[0].dtype
    if base == "hardtanh":
        lo, hi = _scalar(call.arg(1, "min_val", -1)), _scalar(call.arg(2, "max_val", 1))
    elif base == "clamp":
        lo, hi = call.arg(1, "min"), call.arg(2, "max")
        if (lo is not None and _scalar(lo) is None) or (hi is not None and _scalar(hi) is None):
            return None
        lo, hi = (None if v is None else _scalar(v) for v in (lo, hi))
        if lo is None and hi is None:
            return None
    else:
        v = _scalar(call.arg(1, base[-3:]))
        if v is None:
            return None
        lo, hi = (v, None) if base == "clamp_min" else (None, v)
    if len(call.inputs) != 1 or (base == "hardtanh" and (lo is None or hi is None)):
        return None
    if _all(call, INT32) and all(v is None or _int32(v) for v in (lo, hi)):
        return _launch(call, int_clamp, lo=lo, hi=hi)
    if not _floats(call):
        return None
    ops = [(A.maximum, _as_dtype(lo, dtype)) if lo is not None else None,
           (A.minimum, _as_dtype(hi, dtype)) if hi is not None else None]
    (op0, v0), *rest = [o for o in ops if o is not None]
    op1, v1 = rest[0] if rest else (None, None)
    return _launch(call, alu, op0=op0, v0=v0, op1=op1, v1=v1)


@native(*op_names(["clamp", "clamp_min", "clamp_max"], ("Tensor",)))
def plan_clamp_tensor(call: Call) -> Launch | None:
    if not _floats(call) or len({t.dtype for t in call.inputs}) != 1:
        return None
    base = _base(call).rstrip("_")
    if base != "clamp":
        return _launch(call, alu2, op=A.maximum if base == "clamp_min" else A.minimum)
    bounds = [call.arg(1, "min"), call.arg(2, "max")]
    if any(b is not None and not (isinstance(b, Tensor) and not b.is_cpu) for b in bounds):
        return None  # a CPU bound
    if bounds[0] is not None and bounds[1] is not None:
        return _launch(call, clamp2)
    if bounds[0] is None and bounds[1] is None:
        return None
    return _launch(call, alu2, op=A.maximum if bounds[1] is None else A.minimum)


# ---------------------------------------------------------------- backward ops


_BACKWARD = {
    "sigmoid_backward": sigmoid_backward,
    "tanh_backward": tanh_backward,
    "silu_backward": silu_backward,
}


@native("aten::sigmoid_backward.default", "aten::tanh_backward.default", "aten::silu_backward.default",
        "aten::gelu_backward.default", "aten::threshold_backward.default",
        "aten::leaky_relu_backward.default", "aten::hardtanh_backward.default")
def plan_backward(call: Call) -> Launch | None:
    if not _floats(call) or len(call.inputs) != 2:
        return None
    base = _base(call)
    if base == "gelu_backward":
        approximate = call.arg(2, "approximate", "none")
        if approximate not in ("none", "tanh"):
            return None
        return _launch(call, gelu_backward if approximate == "none" else gelu_tanh_backward)
    if base == "threshold_backward":
        th = _scalar(call.arg(2, "threshold"))
        if th is None:
            return None
        return _launch(call, threshold_backward, th=_as_dtype(th, call.inputs[1].dtype))
    if base == "leaky_relu_backward":
        slope = _scalar(call.arg(2, "negative_slope"))
        return None if slope is None else _launch(call, leaky_relu_backward, slope=float(slope))
    if base == "hardtanh_backward":
        lo, hi = _scalar(call.arg(2, "min_val")), _scalar(call.arg(3, "max_val"))
        if lo is None or hi is None:
            return None
        dtype = call.inputs[1].dtype
        return _launch(call, hardtanh_backward, lo=_as_dtype(lo, dtype), hi=_as_dtype(hi, dtype))
    return _launch(call, _BACKWARD[base])


# ---------------------------------------------------------------- binary ops


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
    if not (_floats(call) or _promoted_to_float32(call)):
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


def _promoted_to_float32(call: Call) -> bool:
    """Integer operands of a float32 result (``int_tensor / n``, ``float32 + int32``, DeBERTa's
    ``float * int64``): ATen converts each integer operand to fp32 (rounding to nearest past 2**24)
    and computes in fp32 — what VectorE does reading an int tile. (A 16-bit float result would
    round the integer to that type first: those stay on the host.)"""
    return call.outputs[0].dtype is torch.float32 and all(
        t.dtype in INTEGERS or t.dtype is torch.float32 for t in call.inputs)


@native("aten::pow.Scalar")
def plan_pow_scalar(call: Call) -> Launch | None:
    """``base ** x`` (MPT's ALiBi slopes ``2 ** -(...)``): ATen raises the base, cast to x's float
    dtype, to each exponent in fp32, as VectorE's reversed power does."""
    base = _scalar(call.arg(0, "self"))
    if base is None or len(call.inputs) != 1 or not _floats(call) \
            or call.inputs[0].dtype is not torch.float32:
        return None
    return _launch(call, alu, op0=A.power, v0=_as_dtype(base, torch.float32), reverse0=True)


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


@native("aten::isneginf.default", "aten::isposinf.default")
def plan_isinf_signed(call: Call) -> Launch | None:
    """``x == -inf`` / ``x == inf`` (transformers' masks test for ``-inf``); integers are never
    infinite, so those stay the host's trivial answer."""
    if call.inputs[0].dtype not in FLOAT_DTYPES or call.outputs[0].dtype is not torch.bool:
        return None
    inf = -math.inf if _base(call) == "isneginf" else math.inf
    return _launch(call, alu, op0=A.equal, v0=inf)
