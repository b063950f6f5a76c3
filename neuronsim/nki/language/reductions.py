"""``nl`` reductions along the free dims (``sum``, ``max``, ``mean``...) and the fused ``softmax`` and
``rms_norm``, as the instructions the NKI compiler emits for them."""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.nki import isa as _isa
from neuronsim.nki.isa.vector import reduce_axes
from neuronsim.nki.language.dtypes import float32
from neuronsim.nki.language.movement import copy
from neuronsim.nki.language.tensor import NkiTensor, new_tile
from neuronsim.nki.trace import caller_location
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ActFunc, AluOp


def _reduced_shape(x: NkiTensor, axes, keepdims: bool) -> tuple[int, ...]:
    shape = (
        [1 if i in axes else n for i, n in enumerate(x.shape)]
        if keepdims
        else [n for i, n in enumerate(x.shape) if i not in axes]
    )
    if len(shape) < 2:
        shape.append(1)
    return tuple(shape)


def _reduce(x, op: AluOp, axis, dtype, keepdims: bool, tag: str, negate: bool = False) -> NkiTensor:
    axes = reduce_axes(tag, x, axis)
    out = new_tile(_reduced_shape(x, axes, keepdims), x.dtype if dtype is None else dtype, tag)
    _isa.tensor_reduce(out, op, x, axes, negate=negate)
    return out


def sum(x, axis, dtype=None, keepdims=False):
    """Sum along the trailing free ``axis`` dims (new SBUF tile; VectorE)."""
    return _reduce(x, AluOp.add, axis, dtype, keepdims, "sum")


def max(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.maximum, axis, dtype, keepdims, "max")


def min(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.minimum, axis, dtype, keepdims, "min")


def prod(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.multiply, axis, dtype, keepdims, "prod")


def all(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.minimum, axis, dtype, keepdims, "all")


def any(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.maximum, axis, dtype, keepdims, "any")


def mean(x, axis, dtype=None, keepdims=False):
    """Mean along the trailing free ``axis`` dims (sum, then a scale; VectorE)."""
    out = _reduce(x, AluOp.add, axis, float32 if dtype is None else dtype, keepdims, "mean")
    n = x.size // (out.size or 1)
    _isa.tensor_scalar(out, out, AluOp.multiply, 1.0 / n)
    return out if dtype is not None or x.buf.dtype is DType.float32 else copy(out, x.dtype)


def var(x, axis, dtype=None, keepdims=False):
    """Variance along the trailing free ``axis`` dims: ``mean((x - mean(x))**2)`` (VectorE), in
    fp32 as ``mean``; the result keeps the reduced dims (NKI documents ``keepdims`` as ignored)."""
    m = mean(x, axis, float32, keepdims=True)
    d = x - m
    out = mean(d * d, axis, float32, keepdims=True)
    target = x.dtype if dtype is None else dtype
    return out if target == float32 else copy(out, target)


def _all_free(fn: str, x: NkiTensor, axis) -> None:
    axes = reduce_axes(fn, x, axis)
    if axes[0] != 1:
        raise UnsupportedError(
            f"nl.{fn} over axis={axis} of {x.shape}: only reductions over all free dims are simulated",
            location=caller_location(),
        )


def softmax(x, axis=-1, dtype=None):
    """``exp(x - max) / sum(exp(x - max))`` along the free dims.

    Four instructions: max (VectorE, negated), exp with the -max bias and a running sum (ScalarE),
    reciprocal of the sum (VectorE) and the scale (VectorE).
    """
    _all_free("softmax", x, axis)
    p = x.partitions
    neg_max = new_tile((p, 1), float32, "softmax.max")
    flat = x if len(x.shape) == 2 else x.flatten_dims(1, len(x.shape) - 1)
    _isa.tensor_reduce(neg_max, AluOp.maximum, flat, 1, negate=True)
    e = new_tile(x.shape, float32, "softmax.exp")
    total = new_tile((p, 1), float32, "softmax.sum")
    _isa.activation(
        e,
        ActFunc.exp,
        x,
        bias=neg_max,
        reduce_op=AluOp.add,
        reduce_res=total,
        reduce_cmd=_isa.reduce_cmd.reset_reduce,
    )
    _isa.reciprocal(total, total)
    out = new_tile(x.shape, x.dtype if dtype is None else dtype, "softmax")
    _isa.tensor_scalar(out, e, AluOp.multiply, total)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    """``x / sqrt(mean(x^2) + epsilon) * w`` along the free dims (ScalarE, VectorE, ScalarE rsqrt)."""
    _all_free("rms_norm", x, axis)
    p = x.partitions
    sq = new_tile(x.shape, float32, "rms_norm.square")
    total = new_tile((p, 1), float32, "rms_norm.sum")
    _isa.activation(
        sq, ActFunc.square, x, reduce_op=AluOp.add, reduce_res=total, reduce_cmd=_isa.reduce_cmd.reset_reduce
    )
    _isa.tensor_scalar(total, total, AluOp.multiply, 1.0 / float(n), op1=AluOp.add, operand1=float(epsilon))
    _isa.activation(total, ActFunc.rsqrt, total)
    out = new_tile(x.shape, x.dtype if dtype is None else dtype, "rms_norm")
    weight = w if w.shape == x.shape else w.broadcast_to(x.shape)
    _isa.scalar_tensor_tensor(out, x, AluOp.multiply, total, AluOp.multiply, weight)
    return out
