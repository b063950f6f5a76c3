"""Weight normalization: ``_weight_norm_interface`` (``w = v * g / ||v||``, the norm over every dim
but ``dim``) and its backward — wav2vec2's and HuBERT's positional convolution, any
``torch.nn.utils.weight_norm`` layer.

The kept dim's elements go on the partitions (128 per tile), each one's reduced elements along the
free axis (a strided DMA: for ``dim`` the last, the reduced elements are ``dim``'s size apart):

- forward: the sum of squares is one ScalarE ``activation(square)`` accumulating into a ``[p, 1]``
  column, ``sqrt`` another; ``g / norm`` one VectorE division and ``w = v * (g / norm)`` one
  per-partition product;
- backward: ``grad_g = sum(grad_w * v) / norm`` and ``grad_v = (g / norm) * (grad_w - v * grad_g /
  norm)``, ATen's formula, as per-partition VectorE steps.

Sums run in fp32 in element order (ATen-CPU's vectorized sums group them otherwise: results agree
within fp32 rounding). Covered: float32, the reduced dims walking memory as one, ``g`` and the
norms with the kept dim's elements one walk; the rest runs on the host.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import coalesce
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
P = 128
R_MAX = 8192  # reduced elements per partition kept in SBUF (32 KiB of fp32)


def _tile(shape, dtype=F32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _layout(t, dim: int):
    """((kept size, kept step), (reduced size, reduced step)) of ``t``, or None if the reduced dims
    do not walk memory as one."""
    red = [(t.stride(d), t.shape[d]) for d in range(t.dim()) if d != dim]
    sizes, (steps,) = coalesce([tuple(red)])
    if len(sizes) > 1:
        return None
    return (t.shape[dim], t.stride(dim)), ((sizes[0], steps[0]) if sizes else (1, 1))


def _rows(view, lay, k0, p):
    (_, ks), (r, rs) = lay
    return view.ap([[ks, p], [rs, r]], offset=view.offset + k0 * ks)


def _column(view, step, k0, p):
    return view.ap([[step, p], [1, 1]], offset=view.offset + k0 * step)


def weight_norm_kernel(w, norms, v, g, *, lay, g_step, n_step):
    (k, _), (r, _) = lay
    for k0 in range(0, k, P):
        p = min(P, k - k0)
        vt = _tile((p, r), v.dtype)
        nisa.dma_copy(dst=vt, src=_rows(v, lay, k0, p))
        squares, ss = _tile((p, r)), _tile((p, 1))
        nisa.activation(dst=squares, op=ActFunc.square, data=vt, reduce_op=A.add, reduce_res=ss)
        norm = _tile((p, 1))
        nisa.activation(dst=norm, op=ActFunc.sqrt, data=ss)
        gt = _tile((p, 1))
        nisa.dma_copy(dst=gt, src=_column(g, g_step, k0, p))
        scale = _tile((p, 1))
        nisa.tensor_tensor(dst=scale, data1=gt, data2=norm, op=A.divide)
        wt = _tile((p, r), w.dtype)
        nisa.tensor_scalar(dst=wt, data=vt, op0=A.multiply, operand0=scale)
        nisa.dma_copy(dst=_rows(w, lay, k0, p), src=wt)
        nisa.dma_copy(dst=_column(norms, n_step, k0, p), src=norm)


def weight_norm_backward_kernel(grad_v, grad_g, grad_w, v, g, norms, *, lay, g_step, n_step, gg_step):
    (k, _), (r, _) = lay
    for k0 in range(0, k, P):
        p = min(P, k - k0)
        vt, gw = _tile((p, r), v.dtype), _tile((p, r), grad_w.dtype)
        nisa.dma_copy(dst=vt, src=_rows(v, lay, k0, p))
        nisa.dma_copy(dst=gw, src=_rows(grad_w, lay, k0, p))
        gt, norm = _tile((p, 1)), _tile((p, 1))
        nisa.dma_copy(dst=gt, src=_column(g, g_step, k0, p))
        nisa.dma_copy(dst=norm, src=_column(norms, n_step, k0, p))
        prod, dot = _tile((p, r)), _tile((p, 1))
        nisa.tensor_tensor(dst=prod, data1=gw, data2=vt, op=A.multiply)
        nisa.tensor_reduce(dst=dot, op=A.add, data=prod, axis=1)
        gg = _tile((p, 1))  # grad_g = sum(grad_w * v) / norm
        nisa.tensor_tensor(dst=gg, data1=dot, data2=norm, op=A.divide)
        c = _tile((p, 1))  # -grad_g / norm
        nisa.tensor_tensor(dst=c, data1=gg, data2=norm, op=A.divide)
        nisa.tensor_scalar(dst=c, data=c, op0=A.multiply, operand0=-1.0)
        scale = _tile((p, 1))  # g / norm
        nisa.tensor_tensor(dst=scale, data1=gt, data2=norm, op=A.divide)
        t = _tile((p, r))
        nisa.scalar_tensor_tensor(dst=t, data=vt, op0=A.multiply, operand0=c, op1=A.add, operand1=gw)
        gv = _tile((p, r), grad_v.dtype)
        nisa.tensor_scalar(dst=gv, data=t, op0=A.multiply, operand0=scale)
        nisa.dma_copy(dst=_rows(grad_v, lay, k0, p), src=gv)
        gg_out = _tile((p, 1), grad_g.dtype)
        nisa.tensor_copy(dst=gg_out, src=gg)
        nisa.dma_copy(dst=_column(grad_g, gg_step, k0, p), src=gg_out)


def _kept_step(t, k: int) -> int | None:
    """The step of ``t``'s ``k`` elements (one non-1 dim, or a single element), else None."""
    dims = [(s, st) for s, st in zip(t.shape, t.stride(), strict=True) if s != 1]
    if math.prod(t.shape) != k or len(dims) > 1:
        return None
    return dims[0][1] if dims else 1


def _plan(v, dim, tensors, outputs) -> dict | None:
    if v.dim() == 0 or any(t.dtype is not torch.float32 for t in (*tensors, *outputs)):
        return None
    dim %= v.dim()
    lay = _layout(v, dim)
    if lay is None or lay[1][0] > R_MAX:
        return None
    return {"lay": lay, "dim": dim}


@native("aten::_weight_norm_interface.default")
def plan_weight_norm(call: Call) -> Launch | None:
    v, g = call.arg(0, "v"), call.arg(1, "g")
    dim = call.arg(2, "dim", 0)
    w, norms = call.outputs
    found = _plan(v, dim, (v, g), (w, norms))
    if found is None or w.stride() != v.stride():
        return None
    k = v.shape[found["dim"]]
    g_step, n_step = _kept_step(g, k), _kept_step(norms, k)
    if g_step is None or n_step is None:
        return None
    return Launch(weight_norm_kernel, (OUT(0), OUT(1), IN(0), IN(1)),
                  {"lay": found["lay"], "g_step": g_step, "n_step": n_step}, flops=4.0 * v.numel())


@native("aten::_weight_norm_interface_backward.default")
def plan_weight_norm_backward(call: Call) -> Launch | None:
    names = ("grad_w", "saved_v", "saved_g", "saved_norms")
    grad_w, v, g, norms = (call.arg(i, n) for i, n in enumerate(names))
    dim = call.arg(4, "dim")
    if len(call.inputs) != 4 or len(call.outputs) != 2:
        return None
    grad_v, grad_g = call.outputs
    found = _plan(v, dim, (grad_w, v, g, norms), (grad_v, grad_g))
    if found is None:
        return None
    lay = found["lay"]
    if grad_w.stride() != v.stride() or grad_v.stride() != v.stride():
        return None
    k = v.shape[found["dim"]]
    steps = [_kept_step(t, k) for t in (g, norms, grad_g)]
    if None in steps:
        return None
    return Launch(weight_norm_backward_kernel, (OUT(0), OUT(1), IN(0), IN(1), IN(2), IN(3)),
                  {"lay": lay, "g_step": steps[0], "n_step": steps[1], "gg_step": steps[2]},
                  flops=8.0 * v.numel())
