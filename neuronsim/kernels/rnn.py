"""The fused RNN cells: ``_thnn_fused_lstm_cell`` and ``_thnn_fused_gru_cell``, forward and backward.

``nn.LSTM``/``nn.GRU`` and their cells compute the gate matmuls (``input @ W_ih.T``, ``h @ W_hh.T``)
as ordinary ``mm``/``addmm`` on TensorE, then hand the gate pre-activations to these ops on any
non-CPU device (CUDA's fused kernels; ATen-CPU has none). Each is one kernel here: batch rows on the
partitions (128 per tile), a row's gates along the free axis, so every gate is a column slice of the
row tile — VectorE adds the gates and biases (broadcast to the partitions by a stride-0 DMA), ScalarE
applies sigmoid/tanh per gate slice, VectorE and GpSimd form the products. The backward's bias
gradients are column sums over the batch, on TensorE (``norm.py``'s ones-matmuls, accumulating over
row tiles in PSUM). Everything is fp32 inside and rounds once on the write.

The conventions are CUDA's (aten/src/ATen/native/cuda/RNN.cu), because each op's autograd formula
hands the workspace the forward saved to its backward: LSTM gates ``[i, f, g, o]``, workspace the
activated gates; GRU gates ``[r, z, n]``, workspace ``[r, z, n, hx, hn]`` (``hn`` with its bias).

ATen has no meta kernels for the GRU ops, and the LSTM cell's fails without biases (the runtime
infers outputs on meta tensors): this module registers them (:data:`_META`), shapes as CUDA's
kernels make them.

Covered: float32 / bfloat16 / float16, every tensor of one dtype, contiguous 2-D gates ``[B, k*H]``
and states ``[B, H]``, contiguous 1-D biases (both or neither). Anything else runs on the host (where
the device's decomposition computes it).
"""

from __future__ import annotations

import warnings

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.norm import _broadcast, _rows, column_sums, store_column_sums
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
H_MAX = 2048  # hidden units: a row tile's ~16 fp32 gate-wide rows stay within a partition's SBUF


def _tile(p, n):
    return nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)


def _load(view, r0, p, n, dtype=None):
    t = nl.ndarray((p, n), dtype=dtype or view.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_rows(view, r0, p, n))
    return t


def _store(view, r0, t, dtype):
    p, n = t.shape
    out = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=t)
    nisa.dma_copy(dst=_rows(view, r0, p, n), src=out)


def _gates(ig, hg, bias_i, bias_h, r0, p, n):
    """``input_gates + hidden_gates (+ both biases)`` of rows ``r0 .. r0+p`` (fp32 [p, n])."""
    g = _tile(p, n)
    nisa.tensor_tensor(dst=g, data1=_load(ig, r0, p, n), data2=_load(hg, r0, p, n), op=A.add)
    if bias_i is not None:
        nisa.tensor_tensor(dst=g, data1=g, data2=bias_i[:p], op=A.add)
        nisa.tensor_tensor(dst=g, data1=g, data2=bias_h[:p], op=A.add)
    return g


def _biases(views, p, n, has_bias):
    if not has_bias:
        return None, None
    return _broadcast(views[0], p, n), _broadcast(views[1], p, n)


def _one_minus_times(dst, a, b):
    """``dst = (1 - a) * b``."""
    nisa.scalar_tensor_tensor(dst=dst, data=a, op0=A.subtract, operand0=1.0, reverse0=True,
                              op1=A.multiply, operand1=b)


# ---------------------------------------------------------------- LSTM


def lstm_cell(hy, cy, ws, ig, hg, cx, *bias, rows, h, has_bias):
    n = 4 * h
    bias_i, bias_h = _biases(bias, min(128, rows), n, has_bias)
    for r0 in nl.affine_range(0, rows, 128):
        p = min(128, rows - r0)
        g = _gates(ig, hg, bias_i, bias_h, r0, p, n)
        act = _tile(p, n)  # [i, f, g, o] activated
        for k, func in enumerate((ActFunc.sigmoid, ActFunc.sigmoid, ActFunc.tanh, ActFunc.sigmoid)):
            nisa.activation(dst=act[:, k * h:(k + 1) * h], op=func, data=g[:, k * h:(k + 1) * h])
        i, f, gg, o = (act[:, k * h:(k + 1) * h] for k in range(4))
        c = _tile(p, h)
        nisa.tensor_tensor(dst=c, data1=f, data2=_load(cx, r0, p, h), op=A.multiply)
        ig_prod = _tile(p, h)
        nisa.tensor_tensor(dst=ig_prod, data1=i, data2=gg, op=A.multiply, engine=nisa.gpsimd_engine)
        nisa.tensor_tensor(dst=c, data1=c, data2=ig_prod, op=A.add)
        t = _tile(p, h)
        nisa.activation(dst=t, op=ActFunc.tanh, data=c)
        nisa.tensor_tensor(dst=t, data1=t, data2=o, op=A.multiply)
        _store(hy, r0, t, hy.dtype)
        _store(cy, r0, c, cy.dtype)
        _store(ws, r0, act, ws.dtype)


def lstm_cell_backward(*views, rows, h, has_hy, has_cy, has_bias):
    views = list(views)
    gates_out, gcx_out = views.pop(0), views.pop(0)
    gbias_out = views.pop(0) if has_bias else None
    ghy = views.pop(0) if has_hy else None
    gcy = views.pop(0) if has_cy else None
    cx, cy, ws = views
    n = 4 * h
    sums = {"db": (nl.ndarray((min(128, n), -(-n // 128)), dtype=F32, buffer=nl.psum),
                   nl.ones((min(128, rows), 1), dtype=F32, buffer=nl.sbuf))} if has_bias else {}
    for r0 in nl.affine_range(0, rows, 128):
        p = min(128, rows - r0)
        act = _load(ws, r0, p, n, F32)
        i, f, gg, o = (act[:, k * h:(k + 1) * h] for k in range(4))
        tanh_cy = _tile(p, h)
        nisa.activation(dst=tanh_cy, op=ActFunc.tanh, data=_load(cy, r0, p, h))
        grads = _tile(p, n)  # [gi, gf, gg, go]
        gc = _tile(p, h)  # the cell state's total gradient
        if has_hy:
            dh = _load(ghy, r0, p, h, F32)
            nisa.tensor_tensor(dst=grads[:, 3 * h:], data1=dh, data2=tanh_cy, op=A.multiply)  # d(o)
            sq = _tile(p, h)  # 1 - tanh(cy)^2
            nisa.tensor_tensor(dst=sq, data1=tanh_cy, data2=tanh_cy, op=A.multiply,
                               engine=nisa.gpsimd_engine)
            _one_minus_times(gc, sq, o)
            nisa.tensor_tensor(dst=gc, data1=gc, data2=dh, op=A.multiply)
            if has_cy:
                nisa.tensor_tensor(dst=gc, data1=gc, data2=_load(gcy, r0, p, h, F32), op=A.add)
        else:
            nisa.memset(grads[:, 3 * h:], 0.0)
            nisa.tensor_copy(dst=gc, src=_load(gcy, r0, p, h, F32))
        # sigmoid'(x) = (1 - s) * s; tanh'(x) = 1 - t^2
        tmp = _tile(p, h)
        nisa.tensor_tensor(dst=tmp, data1=gc, data2=gg, op=A.multiply)
        _one_minus_times(tmp, i, tmp)
        nisa.tensor_tensor(dst=grads[:, :h], data1=tmp, data2=i, op=A.multiply)
        nisa.tensor_tensor(dst=tmp, data1=gc, data2=_load(cx, r0, p, h, F32), op=A.multiply)
        _one_minus_times(tmp, f, tmp)
        nisa.tensor_tensor(dst=grads[:, h:2 * h], data1=tmp, data2=f, op=A.multiply)
        nisa.tensor_tensor(dst=tmp, data1=gg, data2=gg, op=A.multiply, engine=nisa.gpsimd_engine)
        _one_minus_times(tmp, tmp, i)
        nisa.tensor_tensor(dst=grads[:, 2 * h:3 * h], data1=tmp, data2=gc, op=A.multiply)
        _one_minus_times(tmp, o, grads[:, 3 * h:])
        nisa.tensor_tensor(dst=grads[:, 3 * h:], data1=tmp, data2=o, op=A.multiply)
        nisa.tensor_tensor(dst=gc, data1=gc, data2=f, op=A.multiply)
        if has_bias:
            column_sums(sums["db"][0], grads, sums["db"][1])
        _store(gates_out, r0, grads, gates_out.dtype)
        _store(gcx_out, r0, gc, gcx_out.dtype)
    store_column_sums(sums, {"db": gbias_out}, n)


# ---------------------------------------------------------------- GRU


def gru_cell(hy, ws, ig, hg, hx, *bias, rows, h, has_bias):
    n = 3 * h
    bias_i, bias_h = _biases(bias, min(128, rows), n, has_bias)
    for r0 in nl.affine_range(0, rows, 128):
        p = min(128, rows - r0)
        xi, hh = _load(ig, r0, p, n, F32), _load(hg, r0, p, n, F32)
        if has_bias:
            nisa.tensor_tensor(dst=xi, data1=xi, data2=bias_i[:p], op=A.add)
            nisa.tensor_tensor(dst=hh, data1=hh, data2=bias_h[:p], op=A.add, engine=nisa.gpsimd_engine)
        work = _tile(p, 5 * h)  # [r, z, n, hx, hn]
        s = _tile(p, 2 * h)
        nisa.tensor_tensor(dst=s, data1=xi[:, :2 * h], data2=hh[:, :2 * h], op=A.add)
        nisa.activation(dst=work[:, :2 * h], op=ActFunc.sigmoid, data=s)
        r, z = work[:, :h], work[:, h:2 * h]
        nisa.tensor_copy(dst=work[:, 4 * h:], src=hh[:, 2 * h:], engine=nisa.gpsimd_engine)
        nisa.dma_copy(dst=work[:, 3 * h:4 * h], src=_rows(hx, r0, p, h))  # casts to fp32
        pre = _tile(p, h)
        nisa.tensor_tensor(dst=pre, data1=hh[:, 2 * h:], data2=r, op=A.multiply)
        nisa.tensor_tensor(dst=pre, data1=pre, data2=xi[:, 2 * h:], op=A.add)
        nisa.activation(dst=work[:, 2 * h:3 * h], op=ActFunc.tanh, data=pre)
        nn, hxt = work[:, 2 * h:3 * h], work[:, 3 * h:4 * h]
        out = _tile(p, h)  # n + z * (hx - n)
        nisa.tensor_tensor(dst=out, data1=hxt, data2=nn, op=A.subtract)
        nisa.tensor_tensor(dst=out, data1=out, data2=z, op=A.multiply)
        nisa.tensor_tensor(dst=out, data1=out, data2=nn, op=A.add)
        _store(hy, r0, out, hy.dtype)
        _store(ws, r0, work, ws.dtype)


def gru_cell_backward(*views, rows, h, has_bias):
    views = list(views)
    gi_out, gh_out, ghx_out = views[:3]
    gbi_out, gbh_out = views[3:5] if has_bias else (None, None)
    ghy, ws = views[-2:]
    n = 3 * h
    sums = {}
    if has_bias:
        ones = nl.ones((min(128, rows), 1), dtype=F32, buffer=nl.sbuf)
        sums = {k: (nl.ndarray((min(128, n), -(-n // 128)), dtype=F32, buffer=nl.psum), ones)
                for k in ("bi", "bh")}
    for r0 in nl.affine_range(0, rows, 128):
        p = min(128, rows - r0)
        work = _load(ws, r0, p, 5 * h, F32)
        r, z, nn, hxt, hn = (work[:, k * h:(k + 1) * h] for k in range(5))
        dh = _load(ghy, r0, p, h, F32)
        gin, ghid = _tile(p, n), _tile(p, n)  # grads of the input and hidden gates: [gr, gz, gn]
        tmp = _tile(p, h)
        nisa.tensor_tensor(dst=tmp, data1=hxt, data2=nn, op=A.subtract)
        nisa.tensor_tensor(dst=tmp, data1=tmp, data2=dh, op=A.multiply)
        _one_minus_times(tmp, z, tmp)
        nisa.tensor_tensor(dst=gin[:, h:2 * h], data1=tmp, data2=z, op=A.multiply)  # d z-gate
        sq = _tile(p, h)
        nisa.tensor_tensor(dst=sq, data1=nn, data2=nn, op=A.multiply, engine=nisa.gpsimd_engine)
        _one_minus_times(tmp, z, dh)
        _one_minus_times(gin[:, 2 * h:], sq, tmp)  # d n-gate pre-activation
        nisa.tensor_tensor(dst=tmp, data1=gin[:, 2 * h:], data2=hn, op=A.multiply)
        _one_minus_times(tmp, r, tmp)
        nisa.tensor_tensor(dst=gin[:, :h], data1=tmp, data2=r, op=A.multiply)  # d r-gate
        nisa.tensor_copy(dst=ghid[:, :2 * h], src=gin[:, :2 * h], engine=nisa.gpsimd_engine)
        nisa.tensor_tensor(dst=ghid[:, 2 * h:], data1=gin[:, 2 * h:], data2=r, op=A.multiply)
        nisa.tensor_tensor(dst=tmp, data1=dh, data2=z, op=A.multiply)
        if has_bias:
            column_sums(sums["bi"][0], gin, sums["bi"][1])
            column_sums(sums["bh"][0], ghid, sums["bh"][1])
        _store(gi_out, r0, gin, gi_out.dtype)
        _store(gh_out, r0, ghid, gh_out.dtype)
        _store(ghx_out, r0, tmp, ghx_out.dtype)
    store_column_sums(sums, {"bi": gbi_out, "bh": gbh_out}, n)


# ---------------------------------------------------------------- planners


def _dense(ts, dtype, shapes) -> bool:
    return all(t is not None and t.dtype == dtype and t.is_contiguous() and tuple(t.shape) == s
               for t, s in zip(ts, shapes, strict=True))


def _index(call: Call, t) -> int:
    return next(k for k, u in enumerate(call.inputs) if u is t)


def _cell_plan(call: Call, k: int):
    """(rows, hidden, has_bias, operands of the inputs) of a fused cell's forward call, or None."""
    names = ("input_gates", "hidden_gates", "cx" if k == 4 else "hx")
    ig, hg, state = (call.arg(i, n) for i, n in enumerate(names))
    bi, bh = call.arg(3, "input_bias"), call.arg(4, "hidden_bias")
    if ig is None or ig.dim() != 2 or ig.dtype not in FLOAT_DTYPES or (bi is None) != (bh is None):
        return None
    rows, h = ig.shape[0], ig.shape[1] // k
    if ig.shape[1] != k * h or not 0 < h <= H_MAX:
        return None
    tensors = [ig, hg, state] + ([bi, bh] if bi is not None else [])
    shapes = [(rows, k * h)] * 2 + [(rows, h)] + [(k * h,)] * (2 if bi is not None else 0)
    if not _dense(tensors, ig.dtype, shapes) or not all(o.is_contiguous() for o in call.outputs):
        return None
    return rows, h, bi is not None, tuple(IN(_index(call, t)) for t in tensors)


@native("aten::_thnn_fused_lstm_cell.default")
def plan_lstm_cell(call: Call) -> Launch | None:
    plan = _cell_plan(call, 4)
    if plan is None:
        return None
    rows, h, has_bias, ins = plan
    return Launch(lstm_cell, (OUT(0), OUT(1), OUT(2), *ins), {"rows": rows, "h": h, "has_bias": has_bias},
                  flops=float(rows * h * 12))


@native("aten::_thnn_fused_gru_cell.default")
def plan_gru_cell(call: Call) -> Launch | None:
    plan = _cell_plan(call, 3)
    if plan is None:
        return None
    rows, h, has_bias, ins = plan
    return Launch(gru_cell, (OUT(0), OUT(1), *ins), {"rows": rows, "h": h, "has_bias": has_bias},
                  flops=float(rows * h * 12))


@native("aten::_thnn_fused_lstm_cell_backward_impl.default")
def plan_lstm_cell_backward(call: Call) -> Launch | None:
    names = ("grad_hy", "grad_cy", "cx", "cy", "workspace")
    ghy, gcy, cx, cy, ws = (call.arg(i, n) for i, n in enumerate(names))
    has_bias = bool(call.arg(5, "has_bias"))
    if cx is None or cx.dim() != 2 or cx.dtype not in FLOAT_DTYPES or (ghy is None and gcy is None):
        return None
    rows, h = cx.shape
    grads = [t for t in (ghy, gcy) if t is not None]
    if not 0 < h <= H_MAX or not _dense([*grads, cx, cy, ws], cx.dtype,
                                        [(rows, h)] * (len(grads) + 2) + [(rows, 4 * h)]):
        return None
    if len(call.outputs) != 2 + has_bias or not all(o.is_contiguous() for o in call.outputs):
        return None
    ins = tuple(IN(_index(call, t)) for t in (*grads, cx, cy, ws))
    return Launch(lstm_cell_backward, (*(OUT(i) for i in range(len(call.outputs))), *ins),
                  {"rows": rows, "h": h, "has_hy": ghy is not None, "has_cy": gcy is not None,
                   "has_bias": has_bias},
                  flops=float(rows * h * 20), result=None if has_bias else lambda outs: (*outs, None))


@native("aten::_thnn_fused_gru_cell_backward.default")
def plan_gru_cell_backward(call: Call) -> Launch | None:
    ghy, ws = call.arg(0, "grad_hy"), call.arg(1, "workspace")
    has_bias = bool(call.arg(2, "has_bias"))
    if ghy is None or ghy.dim() != 2 or ghy.dtype not in FLOAT_DTYPES:
        return None
    rows, h = ghy.shape
    if not 0 < h <= H_MAX or not _dense([ghy, ws], ghy.dtype, [(rows, h), (rows, 5 * h)]):
        return None
    if len(call.outputs) != 3 + 2 * has_bias or not all(o.is_contiguous() for o in call.outputs):
        return None
    return Launch(gru_cell_backward, (*(OUT(i) for i in range(len(call.outputs))), IN(0), IN(1)),
                  {"rows": rows, "h": h, "has_bias": has_bias}, flops=float(rows * h * 16),
                  result=None if has_bias else lambda outs: (*outs, None, None))



# ---------------------------------------------------------------- meta kernels ATen lacks


def _lstm_cell_meta(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    return cx.new_empty(cx.shape), cx.new_empty(cx.shape), input_gates.new_empty(input_gates.shape)


def _gru_cell_meta(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    rows, h = hx.shape
    return hx.new_empty((rows, h)), hx.new_empty((rows, 5 * h))


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    rows, h = grad_hy.shape
    gates = [grad_hy.new_empty((rows, 3 * h)) for _ in range(2)]
    biases = [grad_hy.new_empty((3 * h,)) for _ in range(2)] if has_bias else [None, None]
    return gates[0], gates[1], grad_hy.new_empty((rows, h)), *biases


_META = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "overriding a previously registered kernel" is intended
    _META.impl("_thnn_fused_lstm_cell", _lstm_cell_meta, "Meta")
_META.impl("_thnn_fused_gru_cell", _gru_cell_meta, "Meta")
_META.impl("_thnn_fused_gru_cell_backward", _gru_cell_backward_meta, "Meta")
