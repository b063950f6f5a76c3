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
  widening back. So int64 ops run the int32 chains, with the host's semantics bit for bit.

Arithmetic, comparisons, logic, bit operators and fills are ``arith.py``'s planners on this loop.

A signature whose semantics a chain does not reproduce (an rounding mode, an int alpha on floats,
mixed integer widths, ...) gets ``None`` from its planner and runs on the host.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

Tensor = torch.Tensor
A = AluOp
F32 = nl.float32
SMALL_INTS = (torch.bool, torch.int8, torch.uint8, torch.int16)  # exact as fp32
BIT_DTYPES = (*SMALL_INTS, torch.int32)
INT32 = (torch.int32, torch.int64)  # computed as int32 on GpSimd (int64: the 64-bit policy)


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


def _tmp(like, dtype=F32):
    return nl.ndarray(like.shape, dtype=dtype, buffer=nl.sbuf)


# ---------------------------------------------------------------- tile computations (fp32 path)


def act(dst, x, func, scale=1.0, bias=None):
    nisa.activation(dst=dst, op=func, data=x, scale=scale, bias=bias)


def act_then(dst, x, func, op, value, scale=1.0):
    """``func(x * scale) op value``: ScalarE, then one VectorE step (log2, log10, softplus(beta))."""
    t = _tmp(x)
    act(t, x, func, scale)
    nisa.tensor_scalar(dst=dst, data=t, op0=op, operand0=value)


def alu(dst, x, op0, v0=0.0, op1=None, v1=None, reverse0=False):
    nisa.tensor_scalar(dst=dst, data=x, op0=op0, operand0=v0, reverse0=reverse0, op1=op1, operand1=v1)


def alu2(dst, x, y, op, alpha=1.0):
    """``x op y``; with ``alpha``, ``(y * alpha) op x`` (add and rsub are written that way)."""
    if alpha == 1.0:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
    else:
        nisa.scalar_tensor_tensor(dst=dst, data=y, op0=A.multiply, operand0=alpha, op1=op, operand1=x)


def sign(dst, x):  # (x > 0) - (x < 0): 0 for NaN, as ATen (ScalarE's sign passes NaN through)
    pos = _tmp(x)
    alu(pos, x, A.greater, 0.0)
    nisa.scalar_tensor_tensor(dst=dst, data=x, op0=A.less, operand0=0.0, op1=A.subtract, operand1=pos,
                              reverse1=True)


def mish(dst, x):  # x * tanh(softplus(x))
    t = _tmp(x)
    act(t, x, ActFunc.softplus)
    act(t, t, ActFunc.tanh)
    alu2(dst, t, x, A.multiply)


def hardsigmoid(dst, x):  # min(max(x + 3, 0), 6) / 6, ATen's order of operations
    t = _tmp(x)
    alu(t, x, A.add, 3.0, A.maximum, 0.0)
    alu(dst, t, A.minimum, 6.0, A.divide, 6.0)


def hardswish(dst, x):  # x * min(max(x + 3, 0), 6) / 6
    t = _tmp(x)
    alu(t, x, A.add, 3.0, A.maximum, 0.0)
    nisa.scalar_tensor_tensor(dst=t, data=t, op0=A.minimum, operand0=6.0, op1=A.multiply, operand1=x)
    alu(dst, t, A.divide, 6.0)


def leaky_relu(dst, x, slope):  # x > 0 ? x : slope * x, as one max (slope <= 1) or min (slope > 1)
    pick = A.maximum if slope <= 1.0 else A.minimum
    nisa.scalar_tensor_tensor(dst=dst, data=x, op0=A.multiply, operand0=slope, op1=pick, operand1=x)


def elu(dst, x, alpha, scale, input_scale):
    """``max(x, 0) * scale + (exp(min(x, 0) * input_scale) - 1) * alpha * scale``."""
    pos, neg = _tmp(x), _tmp(x)
    alu(pos, x, A.maximum, 0.0, A.multiply, scale)
    alu(neg, x, A.minimum, 0.0)
    act(neg, neg, ActFunc.exp, input_scale)
    alu(neg, neg, A.subtract, 1.0, A.multiply, alpha * scale)
    alu2(dst, pos, neg, A.add)


def threshold(dst, x, th, value):  # x <= th ? value : x
    pred = _tmp(x, nl.uint8)
    alu(pred, x, A.less_equal, th)
    nisa.tensor_copy(dst=dst, src=x)
    nisa.tensor_copy_predicated(dst=dst, src=value, predicate=pred)


def threshold_backward(dst, grad, x, th):  # x <= th ? 0 : grad
    pred = _tmp(x, nl.uint8)
    alu(pred, x, A.less_equal, th)
    nisa.tensor_copy(dst=dst, src=grad)
    nisa.tensor_copy_predicated(dst=dst, src=0.0, predicate=pred)


def sigmoid_backward(dst, grad, y):  # grad * (1 - y) * y
    t = _tmp(y)
    nisa.scalar_tensor_tensor(dst=t, data=y, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=grad)
    alu2(dst, t, y, A.multiply)


def tanh_backward(dst, grad, y):  # grad * (1 - y * y)
    t = _tmp(y)
    alu2(t, y, y, A.multiply)
    nisa.scalar_tensor_tensor(dst=dst, data=t, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=grad)


def silu_backward(dst, grad, x):  # grad * s * (1 + x * (1 - s)), s = sigmoid(x)
    s, t = _tmp(x), _tmp(x)
    act(s, x, ActFunc.sigmoid)
    nisa.scalar_tensor_tensor(dst=t, data=s, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=x)
    nisa.scalar_tensor_tensor(dst=t, data=t, op0=A.add, operand0=1.0, op1=A.multiply, operand1=s)
    alu2(dst, t, grad, A.multiply)


def gelu_backward(dst, grad, x):  # grad * gelu'(x): ScalarE's gelu_dx, then one VectorE product
    d = _tmp(x)
    act(d, x, ActFunc.gelu_dx)
    alu2(dst, d, grad, A.multiply)


def clamp2(dst, x, lo, hi):  # min(max(x, lo), hi) with tensor bounds (either may be absent)
    if lo is not None and hi is not None:
        t = _tmp(x)
        alu2(t, x, lo, A.maximum)
        alu2(dst, t, hi, A.minimum)
    else:
        alu2(dst, x, lo if hi is None else hi, A.maximum if hi is None else A.minimum)


def fill(dst, value):
    nisa.memset(dst=dst, value=value)


# ---------------------------------------------------------------- tile computations (int32 path)


def int_binary(dst, x, y=None, *, op, value=None, alpha=1):
    """``x op y`` (or ``x op value``) exactly on GpSimd's integer ALU; bool results via an int32 tile."""
    if y is None:
        y = nl.full(x.shape, value, dtype=nl.int32)
    if alpha != 1:
        scaled = _tmp(x, nl.int32)
        nisa.tensor_tensor(dst=scaled, data1=y, data2=nl.full(x.shape, alpha, dtype=nl.int32), op=A.multiply)
        y = scaled
    if dst.dtype == nl.int32:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
    else:
        t = _tmp(x, nl.int32)
        nisa.tensor_tensor(dst=t, data1=x, data2=y, op=op)
        nisa.tensor_copy(dst=dst, src=t)


def int_unary(dst, x, *, op, value=0, reverse=False):
    """``value op x`` (``reverse``) or ``x op value`` with ``value`` an int32 tile: neg, abs."""
    c = nl.full(x.shape, value, dtype=nl.int32)
    nisa.tensor_tensor(dst=dst, data1=c if reverse else x, data2=x if reverse else c, op=op)


def int_clamp(dst, x, lo, hi):
    t = x
    if lo is not None:
        t = _tmp(x, nl.int32) if hi is not None else dst
        nisa.tensor_tensor(dst=t, data1=x, data2=nl.full(x.shape, lo, dtype=nl.int32), op=A.maximum)
    if hi is not None:
        nisa.tensor_tensor(dst=dst, data1=t, data2=nl.full(x.shape, hi, dtype=nl.int32), op=A.minimum)


def bits(dst, x, y=None, *, op, value=0):
    """Bit operators on VectorE (integers as bit patterns)."""
    if y is None:
        nisa.tensor_scalar(dst=dst, data=x, op0=op, operand0=value, engine=nisa.vector_engine)
    else:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op, engine=nisa.vector_engine)


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
    if any(t.dtype is torch.int64 for t in tensors):
        statics["wide"] = tuple(t.dtype is torch.int64 for t in tensors)
    return Launch(elementwise, tuple(operands), statics)


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
        "aten::gelu_backward.default", "aten::threshold_backward.default")
def plan_backward(call: Call) -> Launch | None:
    if not _floats(call) or len(call.inputs) != 2:
        return None
    base = _base(call)
    if base == "gelu_backward":
        if call.arg(2, "approximate", "none") != "none":
            return None
        return _launch(call, gelu_backward)
    if base == "threshold_backward":
        th = _scalar(call.arg(2, "threshold"))
        if th is None:
            return None
        return _launch(call, threshold_backward, th=_as_dtype(th, call.inputs[1].dtype))
    return _launch(call, _BACKWARD[base])
