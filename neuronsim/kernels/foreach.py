"""Multi-tensor ops (``_foreach_*``): what optimizers and gradient clipping run on the device.

One Program per call covers every tensor of the lists, as ATen's multi-tensor-apply kernels do:
for each list position the tensors are walked in ``[128, F]`` tiles (the element-wise tile loop),
loaded by DMA, combined on VectorE (ScalarE for ``sqrt``) and stored back. An optimizer calls the
same op with new scalars every step (``lr / bias_correction``): those arguments are *runtime*
scalars, so a new value does not trace a new Program; the kernel loads them once into SBUF
(``[128, n]``, one DMA broadcasting to every partition) and uses column ``i`` as tensor ``i``'s
``[P, 1]`` operand. A 0-dim device tensor operand (``_foreach_mul_.Tensor``, clipping's scale) is
loaded the same way.

Numerics follow ATen-CPU's per-tensor kernels (fp32 compute, one rounding on the write):
``addcmul``/``addcdiv`` are ``self + (value * t1) op t2``, ``lerp`` takes ATen's two-sided
formula, ``_foreach_norm`` (2-norm) sums squares per tile on VectorE, across tiles in fp32 and
across partitions on TensorE (a ones-vector matmul into PSUM), then ScalarE's sqrt.
"""

from __future__ import annotations

import numpy as np
import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import op_names, tile_loop
from neuronsim.kernels.registry import IN, OUT, RUNTIME, Call, Launch, native
from neuronsim.kernels.tiling import PARTITIONS, elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32


# ---------------------------------------------------------------- the kernel


def broadcast_scalars(vector, n: int):
    """``[128, n]`` fp32 SBUF copy of an HBM vector of ``n`` values, on every partition."""
    t = nl.ndarray((PARTITIONS, n), dtype=F32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=vector.ap([[0, PARTITIONS], [1, n]], offset=vector.offset))
    return t


def multi_tensor(*views, n, lists, scalar, compute, params):
    """``compute(dst, *tiles, s=..., **params)`` over list position ``i`` of each list.

    ``views``: the ``n`` outputs, then ``lists`` input lists of ``n``, then the scalar operand if
    any. ``scalar``: None; ``"tensor"`` (a 0-dim device tensor); ``"one"`` or ``"each"`` (runtime
    scalars: one shared value, or one per list position).
    """
    outs = views[:n]
    ins = [views[n * (1 + j): n * (2 + j)] for j in range(lists)]
    scalars = None
    if scalar is not None:
        src = views[n * (1 + lists)]
        count = n if scalar == "each" else 1
        if scalar == "tensor":
            scalars = nl.ndarray((PARTITIONS, 1), dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=scalars, src=src.ap([[0, PARTITIONS], [1, 1]], offset=src.offset))
            if src.dtype != F32:
                wide = nl.ndarray((PARTITIONS, 1), dtype=F32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=wide, src=scalars)
                scalars = wide
        else:
            scalars = broadcast_scalars(src, count)
    for i in range(n):
        col = i if scalar == "each" else 0

        def step(dst, *xs, col=col):
            s = None if scalars is None else scalars[: dst.shape[0], col:col + 1]
            compute(dst, *xs, s=s, **params)

        tile_loop(outs[i], [lst[i] for lst in ins], step)


def _norm_kernel(*views, n):
    """``outs[i] = ||ins[i]||_2`` (0-dim outputs): the first ``n`` views are outputs."""
    outs, ins = views[:n], views[n:]
    ones = nl.ones((PARTITIONS, 1), dtype=F32, buffer=nl.sbuf)
    for i in range(n):
        x = ins[i]
        tiles = elementwise_tiles([x])
        acc = nl.zeros((PARTITIONS, 1), dtype=F32, buffer=nl.sbuf)
        for tile in tiles:
            p = tile.partitions
            t = nl.ndarray((p, tile.free), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(0, x))
            sq = nl.ndarray((p, tile.free), dtype=F32, buffer=nl.sbuf)
            part = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=sq, data1=t, data2=t, op=A.multiply)
            nisa.tensor_reduce(dst=part, op=A.add, data=sq, axis=1)
            nisa.tensor_tensor(dst=acc[:p], data1=acc[:p], data2=part, op=A.add)
        total = nl.ndarray((1, 1), dtype=F32, buffer=nl.psum)
        nisa.nc_matmul(dst=total, stationary=acc, moving=ones)
        root = nl.ndarray((1, 1), dtype=outs[i].dtype, buffer=nl.sbuf)
        nisa.activation(dst=root, op=ActFunc.sqrt, data=total)
        nisa.dma_copy(dst=outs[i].ap([[1, 1], [1, 1]], offset=outs[i].offset), src=root)


# ---------------------------------------------------------------- tile computations


def scalar_op(dst, x, s, op):  # x op s
    nisa.tensor_scalar(dst=dst, data=x, op0=op, operand0=s)


def list_op(dst, x, y, s, op, alpha=1.0):  # x op (alpha * y)
    if alpha == 1.0:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
    else:
        nisa.scalar_tensor_tensor(dst=dst, data=y, op0=A.multiply, operand0=alpha, op1=op, operand1=x,
                                  reverse1=True)


def addc(dst, x, t1, t2, s, op):  # x + (s * t1) op t2, ATen's order
    t = nl.ndarray(dst.shape, dtype=F32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=t, data=t1, op0=A.multiply, operand0=s, op1=op, operand1=t2)
    nisa.tensor_tensor(dst=dst, data1=x, data2=t, op=A.add)


def lerp(dst, x, end, s, weight, diff=None):
    """ATen's ``|w| < 0.5 ? x + w * (end - x) : end - (end - x) * (1 - w)``; ``diff``: an fp32
    scratch tile on dst's partitions (``dst`` itself if fp32), else one is allocated."""
    if diff is None:
        diff = nl.ndarray(dst.shape, dtype=F32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=diff, data1=end, data2=x, op=A.subtract)
    w = np.float32(weight)
    if abs(w) < 0.5:
        nisa.scalar_tensor_tensor(dst=dst, data=diff, op0=A.multiply, operand0=float(w), op1=A.add,
                                  operand1=x)
    else:
        nisa.scalar_tensor_tensor(dst=dst, data=diff, op0=A.multiply, operand0=float(np.float32(1) - w),
                                  op1=A.subtract, operand1=end, reverse1=True)


def zero(dst, s):
    nisa.memset(dst=dst, value=0.0)


# ---------------------------------------------------------------- planners


_ARITH = {"add": A.add, "sub": A.subtract, "mul": A.multiply, "div": A.divide}


def _names(base_ops, overload):
    """``aten::_foreach_{base}.{overload}`` and its in-place form, where they exist."""
    return op_names((f"_foreach_{b}" for b in base_ops), (overload,))


def _base(call: Call) -> str:
    return call.op.name().split(".")[0].removeprefix("aten::_foreach_").rstrip("_")


def _floats(call: Call, lists: int) -> bool:
    """Float tensors only; at each list position one shape and dtype across the lists."""
    n = len(call.outputs)
    groups = [call.outputs, *(call.inputs_of(p) for p in range(lists))]
    return all(len(g) == n for g in groups) and all(
        call.outputs[i].dtype in FLOAT_DTYPES and len({(tuple(g[i].shape), g[i].dtype) for g in groups}) == 1
        for i in range(n))


def _launch(call: Call, lists: int, scalar, compute, **params) -> Launch:
    n = len(call.outputs)
    operands = [OUT(i) for i in range(n)]
    operands += [IN(k) for k in range(lists * n)]
    if scalar == "tensor":
        operands.append(IN(lists * n))
    elif scalar is not None:
        operands.append(RUNTIME)
    return Launch(multi_tensor, tuple(operands),
                  {"n": n, "lists": lists, "scalar": scalar, "compute": compute, "params": params})


def _python_scalar(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


@native(*_names(_ARITH, "Scalar"), runtime=("scalar",))
def plan_scalar(call: Call) -> Launch | None:
    if not _python_scalar(call.arg(1, "scalar")) or not _floats(call, 1):
        return None
    return _launch(call, 1, "one", scalar_op, op=_ARITH[_base(call)])


@native(*_names(_ARITH, "ScalarList"), runtime=("scalars",))
def plan_scalar_list(call: Call) -> Launch | None:
    scalars = call.arg(1, "scalars")
    if not all(_python_scalar(x) for x in scalars) or not _floats(call, 1):
        return None
    return _launch(call, 1, "each", scalar_op, op=_ARITH[_base(call)])


@native(*_names(("add", "sub", "mul", "div"), "List"))
def plan_list(call: Call) -> Launch | None:
    alpha = call.arg(2, "alpha", 1)
    if not _python_scalar(alpha) or not _floats(call, 2):
        return None
    return _launch(call, 2, None, list_op, op=_ARITH[_base(call)], alpha=float(np.float32(alpha)))


@native(*_names(("mul", "div"), "Tensor"))
def plan_tensor_scalar(call: Call) -> Launch | None:
    other = call.inputs_of(1)
    if len(other) != 1 or other[0].dim() != 0 or other[0].dtype not in FLOAT_DTYPES or not _floats(call, 1):
        return None
    return _launch(call, 1, "tensor", scalar_op, op=_ARITH[_base(call)])


@native(*_names(("addcmul", "addcdiv"), "Scalar"), runtime=("value",))
def plan_addc(call: Call) -> Launch | None:
    if not _python_scalar(call.arg(3, "value", 1)) or not _floats(call, 3):
        return None
    op = A.multiply if _base(call) == "addcmul" else A.divide
    return _launch(call, 3, "one", addc, op=op)


@native(*_names(("addcmul", "addcdiv"), "ScalarList"), runtime=("scalars",))
def plan_addc_list(call: Call) -> Launch | None:
    if not all(_python_scalar(x) for x in call.arg(3, "scalars")) or not _floats(call, 3):
        return None
    op = A.multiply if _base(call) == "addcmul" else A.divide
    return _launch(call, 3, "each", addc, op=op)


@native(*_names(("lerp",), "Scalar"))
def plan_lerp(call: Call) -> Launch | None:
    weight = call.arg(2, "weight")
    if not _python_scalar(weight) or not _floats(call, 2):
        return None
    return _launch(call, 2, None, lerp, weight=float(weight))


def _unary_table() -> dict:
    """``_foreach_<name>`` -> (tile computation, params): the element-wise family's unary float ops
    (ScalarE activations and their VectorE chains) and the rounding family's."""
    from neuronsim.kernels import rounding
    from neuronsim.kernels.elementwise import _UNARY as ELEMENTWISE

    table = {name: entry for name, entry in ELEMENTWISE.items()}
    table.update({name: (fn, {}) for name, fn in rounding._UNARY.items()})
    return {name: entry for name, entry in table.items()
            if getattr(torch.ops.aten, f"_foreach_{name}", None) is not None}


_UNARY = _unary_table()


def unary(dst, x, s, fn, fn_params):
    fn(dst, x, **fn_params)


@native(*_names(_UNARY, "default"))
def plan_unary(call: Call) -> Launch | None:
    if not _floats(call, 1):
        return None
    compute, params = _UNARY[_base(call)]
    return _launch(call, 1, None, unary, fn=compute, fn_params=params)


@native("aten::_foreach_zero_.default")
def plan_zero(call: Call) -> Launch | None:
    if not _floats(call, 0):
        return None
    return _launch(call, 0, None, zero)


@native("aten::_foreach_norm.Scalar")
def plan_norm(call: Call) -> Launch | None:
    if call.arg(1, "ord", 2) != 2 or call.arg(2, "dtype") is not None:
        return None
    n = len(call.outputs)
    if not all(t.dtype in (*FLOAT_DTYPES,) for t in call.inputs) or len(call.inputs) != n:
        return None
    return Launch(_norm_kernel, (*(OUT(i) for i in range(n)), *(IN(i) for i in range(n))), {"n": n})
