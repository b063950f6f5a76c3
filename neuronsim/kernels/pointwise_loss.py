"""Point-wise losses: binary cross-entropy, MSE, smooth L1 and Huber (forward and backward, every
reduction, functional and ``out=``), and ``log_sigmoid`` (which BCE-with-logits uses).

Each is an element-wise chain on ``[128, F]`` tiles (``elementwise.tile_loop``'s layout, any
strides and broadcasts): ScalarE for the logarithms and exponentials, VectorE for the arithmetic
and the selects, every intermediate in fp32 and one rounding on the write, in ATen's order of
operations (``(t - 1) * max(log(1 - x), -100) - t * max(log(x), -100)``; the backward's
``g * (x - t) / max((1 - x) * x, 1e-12)``, then the weight, then ``/ n`` for a mean).

``reduction='mean'|'sum'``: each tile's losses are summed along the free axis (VectorE
``tensor_reduce``) and the per-partition sums across partitions by TensorE (``col.T @ ones``,
accumulating in one PSUM element over all tiles, fp32); VectorE divides by ``n`` once. A mean or
sum backward reads the 0-dim ``grad_output`` broadcast (a stride-0 access pattern).

BCE's inputs must lie in [0, 1]: a call whose input or target does not runs on the host
(``Launch.admit``), where ATen raises its error. L1 loss is a composite of native ops already.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import elementwise
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}
BCE_EPSILON = 1e-12  # ATen's floor of (1 - x) * x in the BCE backward
LOG_FLOOR = -100.0  # ATen clamps BCE's logarithms here


def _tmp(like):
    return nl.ndarray(like.shape, dtype=F32, buffer=nl.sbuf)


# ---------------------------------------------------------------- forward chains


def bce(dst, x, t, *w):
    lx, l1x = _tmp(x), _tmp(x)
    nisa.activation(dst=lx, op=ActFunc.log, data=x)
    nisa.activation(dst=l1x, op=ActFunc.log, data=x, scale=-1.0, bias=1.0)  # log(1 - x)
    nisa.tensor_scalar(dst=lx, data=lx, op0=A.maximum, operand0=LOG_FLOOR)
    nisa.tensor_scalar(dst=l1x, data=l1x, op0=A.maximum, operand0=LOG_FLOOR)
    nisa.scalar_tensor_tensor(dst=l1x, data=t, op0=A.subtract, operand0=1.0, op1=A.multiply, operand1=l1x)
    nisa.tensor_tensor(dst=lx, data1=t, data2=lx, op=A.multiply)
    nisa.tensor_tensor(dst=dst if not w else l1x, data1=l1x, data2=lx, op=A.subtract)
    if w:
        nisa.tensor_tensor(dst=dst, data1=l1x, data2=w[0], op=A.multiply)


def mse(dst, x, t):
    d = _tmp(x)
    nisa.tensor_tensor(dst=d, data1=x, data2=t, op=A.subtract)
    nisa.tensor_tensor(dst=dst, data1=d, data2=d, op=A.multiply)


def _abs_diff(x, t):
    d = _tmp(x)
    nisa.tensor_tensor(dst=d, data1=x, data2=t, op=A.subtract)
    nisa.tensor_scalar(dst=d, data=d, op0=A.abs_max, operand0=0.0)
    return d


def smooth_l1(dst, x, t, beta):
    """``z < beta ? 0.5 * z * z / beta : z - 0.5 * beta`` with ``z = |x - t|``."""
    z = _abs_diff(x, t)
    quad, small = _tmp(x), nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=quad, data=z, op0=A.multiply, operand0=0.5, op1=A.multiply, operand1=z)
    nisa.tensor_scalar(dst=quad, data=quad, op0=A.divide, operand0=beta)
    nisa.tensor_scalar(dst=small, data=z, op0=A.less, operand0=beta)
    nisa.tensor_scalar(dst=z, data=z, op0=A.subtract, operand0=0.5 * beta)
    nisa.select_reduce(dst=dst, predicate=small, on_true=quad, on_false=z)


def huber(dst, x, t, delta):
    """``z < delta ? 0.5 * z * z : delta * (z - 0.5 * delta)`` with ``z = |x - t|``."""
    z = _abs_diff(x, t)
    quad, small = _tmp(x), nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=quad, data=z, op0=A.multiply, operand0=0.5, op1=A.multiply, operand1=z)
    nisa.tensor_scalar(dst=small, data=z, op0=A.less, operand0=delta)
    nisa.tensor_scalar(dst=z, data=z, op0=A.subtract, operand0=0.5 * delta, op1=A.multiply, operand1=delta)
    nisa.select_reduce(dst=dst, predicate=small, on_true=quad, on_false=z)


# ---------------------------------------------------------------- backward chains


def _finish(dst, r, w, n):
    """``r`` (* w) (/ n) into ``dst``: ATen multiplies by the weight, then divides for a mean."""
    last = [op for op in (("w", w), ("n", n)) if op[1] is not None]
    if not last:
        nisa.tensor_copy(dst=dst, src=r)
    for i, (kind, v) in enumerate(last):
        out = dst if i == len(last) - 1 else r
        if kind == "w":
            nisa.tensor_tensor(dst=out, data1=r, data2=v, op=A.multiply)
        else:
            nisa.tensor_scalar(dst=out, data=r, op0=A.divide, operand0=float(v))


def bce_backward(dst, g, x, t, *w, n):
    num, den = _tmp(x), _tmp(x)
    nisa.tensor_tensor(dst=num, data1=x, data2=t, op=A.subtract)
    nisa.tensor_tensor(dst=num, data1=g, data2=num, op=A.multiply)
    nisa.scalar_tensor_tensor(dst=den, data=x, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=x)  # (1 - x) * x
    nisa.tensor_scalar(dst=den, data=den, op0=A.maximum, operand0=BCE_EPSILON)
    nisa.tensor_tensor(dst=num, data1=num, data2=den, op=A.divide)
    _finish(dst, num, w[0] if w else None, n)


def mse_backward(dst, g, x, t, norm):
    """``norm * (x - t) * g``, ``norm = 2 (/ n)``."""
    d = _tmp(x)
    nisa.tensor_tensor(dst=d, data1=x, data2=t, op=A.subtract)
    nisa.scalar_tensor_tensor(dst=dst, data=d, op0=A.multiply, operand0=norm, op1=A.multiply, operand1=g)


def _three_way(dst, d, g, lo, hi, mid, outer):
    """``d <= -lo ? -outer * g : d >= hi ? outer * g : mid`` (``outer`` is ``norm`` or ``norm * delta``)."""
    neg, pos = (nl.ndarray(d.shape, dtype=nl.uint8, buffer=nl.sbuf) for _ in range(2))
    nisa.tensor_scalar(dst=neg, data=d, op0=A.less_equal, operand0=-lo)
    nisa.tensor_scalar(dst=pos, data=d, op0=A.greater_equal, operand0=hi)
    side = _tmp(d)
    nisa.tensor_scalar(dst=side, data=g, op0=A.multiply, operand0=outer)
    nisa.tensor_copy_predicated(dst=mid, src=side, predicate=pos)
    nisa.tensor_scalar(dst=side, data=g, op0=A.multiply, operand0=-outer)
    nisa.tensor_copy_predicated(dst=mid, src=side, predicate=neg)
    nisa.tensor_copy(dst=dst, src=mid)


def smooth_l1_backward(dst, g, x, t, norm, beta):
    d, mid = _tmp(x), _tmp(x)
    nisa.tensor_tensor(dst=d, data1=x, data2=t, op=A.subtract)
    nisa.scalar_tensor_tensor(dst=mid, data=d, op0=A.multiply, operand0=norm, op1=A.multiply, operand1=g)
    nisa.tensor_scalar(dst=mid, data=mid, op0=A.divide, operand0=beta)
    _three_way(dst, d, g, beta, beta, mid, norm)


def huber_backward(dst, g, x, t, norm, delta):
    d, mid = _tmp(x), _tmp(x)
    nisa.tensor_tensor(dst=d, data1=x, data2=t, op=A.subtract)
    nisa.scalar_tensor_tensor(dst=mid, data=d, op0=A.multiply, operand0=norm, op1=A.multiply, operand1=g)
    _three_way(dst, d, g, delta, delta, mid, norm * delta)


# ---------------------------------------------------------------- log_sigmoid


def log_sigmoid(out, buffer, x):
    """``out = min(x, 0) - log1p(z)`` and ``buffer = z = exp(-|x|)``, ATen-CPU's pair: ``out`` is
    ``-softplus(-x)``, which ScalarE's softplus computes in that form (``max(x, 0) + log1p(exp(-|x|))``)."""
    def chain(dst_out, dst_buf, xt):
        sp, z = _tmp(xt), _tmp(xt)
        nisa.activation(dst=sp, op=ActFunc.softplus, data=xt, scale=-1.0)
        nisa.tensor_scalar(dst=dst_out, data=sp, op0=A.multiply, operand0=-1.0)
        nisa.tensor_scalar(dst=z, data=xt, op0=A.abs_max, operand0=0.0)
        nisa.activation(dst=dst_buf, op=ActFunc.exp, data=z, scale=-1.0)

    _two_output_loop(out, buffer, x, chain)


def _two_output_loop(out, buffer, x, chain):
    views = [out, buffer, x]
    tiles = elementwise_tiles(views)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        xt = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=tile.of(2, x))
        o, b = (nl.ndarray(shape, dtype=v.dtype, buffer=nl.sbuf) for v in (out, buffer))
        chain(o, b, xt)
        nisa.dma_copy(dst=tile.of(0, out), src=o)
        nisa.dma_copy(dst=tile.of(1, buffer), src=b)


def log_sigmoid_backward(dst, g, x):
    """``(max_deriv - sign * z / (1 + z)) * g``: ``x < 0`` gives ``1 - z/(1+z)``, else ``z/(1+z)``."""
    z, q = _tmp(x), _tmp(x)
    neg = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=z, data=x, op0=A.abs_max, operand0=0.0)
    nisa.activation(dst=z, op=ActFunc.exp, data=z, scale=-1.0)
    nisa.tensor_scalar(dst=q, data=z, op0=A.add, operand0=1.0)
    nisa.tensor_tensor(dst=q, data1=z, data2=q, op=A.divide)  # z / (1 + z)
    nisa.tensor_scalar(dst=neg, data=x, op0=A.less, operand0=0.0)
    nisa.tensor_scalar(dst=z, data=q, op0=A.subtract, operand0=1.0, reverse0=True)  # 1 - q
    nisa.tensor_copy_predicated(dst=q, src=z, predicate=neg)
    nisa.tensor_tensor(dst=dst, data1=q, data2=g, op=A.multiply)


# ---------------------------------------------------------------- the reduced kernel


def reduced(out, *ins, compute, params, shape, mean):
    """``out`` (0-dim) = the sum (mean) over ``shape`` of ``compute(loss_tile, *input_tiles)``."""
    P = nl.tile_size.pmax
    views = [v.broadcast_to(shape) for v in ins]
    tiles = elementwise_tiles(views)
    ones = nl.ones((P, 1), dtype=F32, buffer=nl.sbuf)
    acc = nl.ndarray((1, 1), dtype=F32, buffer=nl.psum)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        ts = []
        for k, v in enumerate(views):
            t = nl.ndarray((tile.partitions, tile.free), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(k, v))
            ts.append(t)
        loss = nl.ndarray((tile.partitions, tile.free), dtype=F32, buffer=nl.sbuf)
        compute(loss, *ts, **params)
        col = nl.ndarray((tile.partitions, 1), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=col, op=A.add, data=loss, axis=1)
        nisa.nc_matmul(dst=acc, stationary=col, moving=ones[:tile.partitions])
    total = nl.ndarray((1, 1), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=acc)
    res = nl.ndarray((1, 1), dtype=out.dtype, buffer=nl.sbuf)
    if mean:
        nisa.tensor_scalar(dst=res, data=total, op0=A.divide, operand0=float(math.prod(shape)))
    else:
        nisa.tensor_copy(dst=res, src=total)
    nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], offset=out.offset), src=res)


# ---------------------------------------------------------------- planners


def _floats_alike(*ts) -> bool:
    present = [t for t in ts if t is not None]
    return all(t.dtype in FLOAT_DTYPES for t in present) and len({t.dtype for t in present}) == 1


def _positions(call: Call, *ts) -> list[int]:
    return [next(i for i, u in enumerate(call.inputs) if u is t) for t in ts if t is not None]


def _forward(call: Call, compute, ins, reduction, **params) -> Launch | None:
    x, t = ins[0], ins[1]
    out = call.outputs[0]
    present = [i for i in ins if i is not None]
    if reduction is None or not _floats_alike(*ins, out) or len(call.inputs) != len(present):
        return None
    shape = tuple(torch.broadcast_shapes(*(i.shape for i in ins if i is not None)))
    if shape != tuple(x.shape) or t.shape != x.shape:
        return None
    pos = _positions(call, *ins)
    flops = float(x.numel() * 8)
    operands = (OUT(0), *map(IN, pos))
    if reduction == "none":
        return Launch(elementwise, operands, {"compute": compute, "params": params}, flops=flops)
    statics = {"compute": compute, "params": params, "shape": shape, "mean": reduction == "mean"}
    return Launch(reduced, operands, statics, flops=flops)


def _backward(call: Call, compute, ins, **params) -> Launch | None:
    g, x, t = ins[:3]
    out = call.outputs[0]
    if not _floats_alike(*ins, out) or len(call.inputs) != len([i for i in ins if i is not None]):
        return None
    if t.shape != x.shape or tuple(out.shape) != tuple(x.shape):
        return None
    try:
        torch.broadcast_shapes(g.shape, x.shape)
    except RuntimeError:
        return None
    operands = (OUT(0), *map(IN, _positions(call, *ins)))
    return Launch(elementwise, operands, {"compute": compute, "params": params}, flops=float(x.numel() * 6))


def _in_unit_interval(pos_x: int, pos_t: int):
    def admit(inputs) -> bool:
        return all(bool(((v >= 0) & (v <= 1)).all()) for v in (inputs[pos_x], inputs[pos_t]))

    return admit


@native("aten::binary_cross_entropy.default", "aten::binary_cross_entropy.out")
def plan_bce(call: Call) -> Launch | None:
    x, t, w = call.arg(0, "self"), call.arg(1, "target"), call.arg(2, "weight")
    launch = _forward(call, bce, (x, t, w), REDUCTIONS.get(call.arg(3, "reduction", 1)))
    if launch is None:
        return None
    px, pt = _positions(call, x, t)
    return Launch(launch.body, launch.operands, launch.statics, flops=launch.flops,
                  admit=_in_unit_interval(px, pt))


@native("aten::binary_cross_entropy_backward.default", "aten::binary_cross_entropy_backward.grad_input")
def plan_bce_backward(call: Call) -> Launch | None:
    g, x, t, w = (call.arg(i, n) for i, n in enumerate(("grad_output", "self", "target", "weight")))
    reduction = REDUCTIONS.get(call.arg(4, "reduction", 1))
    if reduction is None:
        return None
    return _backward(call, bce_backward, (g, x, t, w), n=x.numel() if reduction == "mean" else None)


@native("aten::mse_loss.default", "aten::mse_loss.out")
def plan_mse(call: Call) -> Launch | None:
    x, t = call.arg(0, "self"), call.arg(1, "target")
    return _forward(call, mse, (x, t), REDUCTIONS.get(call.arg(2, "reduction", 1)))


@native("aten::mse_loss_backward.default", "aten::mse_loss_backward.grad_input")
def plan_mse_backward(call: Call) -> Launch | None:
    g, x, t = (call.arg(i, n) for i, n in enumerate(("grad_output", "self", "target")))
    reduction = REDUCTIONS.get(call.arg(3, "reduction"))
    if reduction is None:
        return None
    return _backward(call, mse_backward, (g, x, t), norm=2.0 / x.numel() if reduction == "mean" else 2.0)


def _positive(v) -> float | None:
    return float(v) if isinstance(v, float | int) and v > 0 and math.isfinite(v) else None


@native("aten::smooth_l1_loss.default", "aten::smooth_l1_loss.out")
def plan_smooth_l1(call: Call) -> Launch | None:
    beta = _positive(call.arg(3, "beta", 1.0))  # beta = 0 is L1 loss: ATen takes that path itself
    if beta is None:
        return None
    x, t = call.arg(0, "self"), call.arg(1, "target")
    return _forward(call, smooth_l1, (x, t), REDUCTIONS.get(call.arg(2, "reduction", 1)), beta=beta)


@native("aten::smooth_l1_loss_backward.default", "aten::smooth_l1_loss_backward.grad_input")
def plan_smooth_l1_backward(call: Call) -> Launch | None:
    g, x, t = (call.arg(i, n) for i, n in enumerate(("grad_output", "self", "target")))
    reduction, beta = REDUCTIONS.get(call.arg(3, "reduction")), _positive(call.arg(4, "beta"))
    if reduction is None or beta is None:
        return None
    norm = 1.0 / x.numel() if reduction == "mean" else 1.0
    return _backward(call, smooth_l1_backward, (g, x, t), norm=norm, beta=beta)


@native("aten::huber_loss.default", "aten::huber_loss.out")
def plan_huber(call: Call) -> Launch | None:
    delta = _positive(call.arg(3, "delta", 1.0))
    if delta is None:
        return None
    x, t = call.arg(0, "self"), call.arg(1, "target")
    return _forward(call, huber, (x, t), REDUCTIONS.get(call.arg(2, "reduction", 1)), delta=delta)


@native("aten::huber_loss_backward.default", "aten::huber_loss_backward.out")
def plan_huber_backward(call: Call) -> Launch | None:
    g, x, t = (call.arg(i, n) for i, n in enumerate(("grad_output", "self", "target")))
    reduction, delta = REDUCTIONS.get(call.arg(3, "reduction")), _positive(call.arg(4, "delta"))
    if reduction is None or delta is None:
        return None
    norm = 1.0 / x.numel() if reduction == "mean" else 1.0
    return _backward(call, huber_backward, (g, x, t), norm=norm, delta=delta)


@native("aten::log_sigmoid_forward.default", "aten::log_sigmoid_forward.output")
def plan_log_sigmoid(call: Call) -> Launch | None:
    x = call.inputs[0]
    if len(call.inputs) != 1 or not _floats_alike(x, *call.outputs) or any(
            tuple(o.shape) != tuple(x.shape) for o in call.outputs):
        return None
    return Launch(log_sigmoid, (OUT(0), OUT(1), IN(0)), flops=float(x.numel() * 5))


@native("aten::log_sigmoid_backward.default", "aten::log_sigmoid_backward.grad_input")
def plan_log_sigmoid_backward(call: Call) -> Launch | None:
    g, x = call.arg(0, "grad_output"), call.arg(1, "self")
    if not _floats_alike(g, x, call.outputs[0]) or tuple(g.shape) != tuple(x.shape):
        return None
    return Launch(elementwise, (OUT(0), *map(IN, _positions(call, g, x))),
                  {"compute": log_sigmoid_backward, "params": {}}, flops=float(x.numel() * 6))
