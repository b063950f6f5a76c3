"""Batch normalization: ``native_batch_norm`` (training and eval, running statistics updated in
place) and ``native_batch_norm_backward``.

Layout: channels on the partitions (128 per tile), each channel's ``N x spatial`` values along the
free axis, loaded a block of images at a time (per partition: rows of ``H*W`` contiguous elements).
Every statistic is then a free-axis reduction on one partition:

- mean and (population) variance: VectorE ``bn_stats`` per 512 elements, ``bn_aggr`` over all of a
  channel's chunks; ``invstd = rsqrt(var + eps)`` on ScalarE;
- the running statistics: ``momentum * batch + (1 - momentum) * running`` (the variance unbiased,
  ``* n / (n - 1)``), written back into ``running_mean`` / ``running_var`` in place as ATen does;
- the output ``x * alpha + beta`` with per-channel ``alpha = invstd * weight`` and ``beta = bias -
  mean * alpha`` (ATen's form): one ScalarE ``activation`` per block with per-partition scale and
  bias, while VectorE computes the next block's statistics.

The backward needs two per-channel sums, ``sum(dy)`` (ScalarE ``activation`` accumulating its row
sum) and ``sum((x - mean) * dy)`` (VectorE ``scalar_tensor_tensor`` then ``tensor_reduce``), then
``grad_input = dy * s - x * (k * s) + (mean * k - sum(dy) / n) * s`` with ``s = invstd * weight``
and ``k = sum((x - mean) * dy) * invstd^2 / n`` (eval: ``dy * s``): one ScalarE and one VectorE
instruction per block. ``grad_weight = sum((x - mean) * dy) * invstd``, ``grad_bias = sum(dy)``.

A channel's values stay in SBUF between the two passes when they fit (``RESIDENT_BYTES``), else
they are loaded again. Covered: float32 / bfloat16 / float16 inputs with parameters and statistics
of any of those dtypes, ``[N, C, ...]`` inputs whose spatial dims are walked as one, at most
``MAX_VALUES`` values per channel. Instance norm reaches these kernels through ATen's composite
(a batch norm over ``[1, N*C, ...]``).
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
BLOCK_BYTES = 16 * 1024  # per partition: one block of a channel chunk's values
RESIDENT_BYTES = 48 * 1024  # per partition and tensor: values kept between the passes
MAX_VALUES = 1 << 20  # values per channel (the statistics of 2048 bn_stats chunks)


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def as_ncs(view):
    """``[N, C, ...]`` as ``[N, C, S]`` (the planner checked that the spatial dims merge)."""
    if len(view.shape) == 2:
        return view.expand_dim(2)
    if len(view.shape) == 3:
        return view
    return view.flatten_dims(2, len(view.shape) - 1)


def blocks(n: int, s: int, isz: int) -> list[tuple[int, int, int, int]]:
    """``(n0, nb, s0, sn)``: whole images while they fit BLOCK_BYTES, else pieces of one image."""
    if s * isz <= BLOCK_BYTES:
        per = max(1, BLOCK_BYTES // (s * isz))
        per = -(-n // -(-n // per))
        return [(n0, nb, 0, s) for n0, nb in _chunks(n, per)]
    piece = BLOCK_BYTES // isz
    return [(n0, 1, s0, sn) for n0 in range(n) for s0, sn in _chunks(s, piece)]


class Channels:
    """The values of channels ``c0 .. c0+cs`` of an ``[N, C, S]`` view, block by block; kept in SBUF
    after the first pass if they fit."""

    def __init__(self, view, c0, cs, blks, resident):
        self.view, self.c0, self.cs, self.blks = view, c0, cs, blks
        self.kept = {} if resident else None

    def block(self, i):
        if self.kept is not None and i in self.kept:
            return self.kept[i]
        n0, nb, s0, sn = self.blks[i]
        t = nl.ndarray((self.cs, nb, sn), dtype=self.view.dtype, buffer=nl.sbuf)
        src = self.view[n0:n0 + nb, self.c0:self.c0 + self.cs, s0:s0 + sn]
        nisa.dma_copy(dst=t, src=src.permute((1, 0, 2)))
        if self.kept is not None:
            self.kept[i] = t
        return t


def column(view, c0, cs, dtype=F32):
    """``view[c0:c0+cs]`` (1-d HBM) as an SBUF ``[cs, 1]`` tile (DMA casts)."""
    t = nl.ndarray((cs, 1), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_col(view, c0, cs))
    return t


def _col(view, c0, cs):
    step = view.dims[0][0]
    return view.ap([[step, cs], [1, 1]], offset=view.offset + c0 * step)


def store_column(view, c0, t):
    nisa.dma_copy(dst=_col(view, c0, t.shape[0]), src=t)


def _flat(t):
    return t.reshape((t.shape[0], math.prod(t.shape[1:])))


def _scale_shift(invstd, mean, w, b):
    """``alpha = invstd * w`` and ``beta = b - mean * alpha`` as [cs, 1] fp32 columns."""
    cs = invstd.shape[0]
    alpha = invstd
    if w is not None:
        alpha = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=alpha, data1=invstd, data2=w, op=A.multiply)
    beta = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
    if b is not None:  # b - mean * alpha
        nisa.scalar_tensor_tensor(dst=beta, data=mean, op0=A.multiply, operand0=-1.0, op1=A.multiply,
                                  operand1=alpha)
        nisa.tensor_tensor(dst=beta, data1=beta, data2=b, op=A.add)
    else:
        nisa.scalar_tensor_tensor(dst=beta, data=mean, op0=A.multiply, operand0=-1.0, op1=A.multiply,
                                  operand1=alpha)
    return alpha, beta


def _update(running, c0, batch, momentum):
    """``running = momentum * batch + (1 - momentum) * running``, in place in HBM."""
    cs = batch.shape[0]
    old = column(running, c0, cs)
    nisa.tensor_scalar(dst=old, data=old, op0=A.multiply, operand0=1.0 - momentum)
    new = nl.ndarray((cs, 1), dtype=running.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=new, data=batch, op0=A.multiply, operand0=momentum, op1=A.add, operand1=old)
    store_column(running, c0, new)


# ---------------------------------------------------------------- forward


def batch_norm(y, save_mean, save_invstd, x, *params, has, training, momentum, eps):
    P = nl.tile_size.pmax
    FMAX = nl.tile_size.bn_stats_fmax
    it = iter(params)
    w, b, rm, rv = (next(it) if has[k] else None for k in ("w", "b", "rm", "rv"))
    x, y = as_ncs(x), as_ncs(y)
    n, c, s = x.shape
    blks = blocks(n, s, max(x.dtype.itemsize, 4))
    resident = training and n * s * x.dtype.itemsize <= RESIDENT_BYTES
    for c0, cs in _chunks(c, P):
        xs = Channels(x, c0, cs, blks, resident)
        if training:
            n_pieces = sum(len(_chunks(nb * sn, FMAX)) for _, nb, _, sn in blks)
            stats = nl.ndarray((cs, 6 * n_pieces), dtype=F32, buffer=nl.sbuf)
            j = 0
            for i in range(len(blks)):
                flat = _flat(xs.block(i))
                for k0, kn in _chunks(flat.shape[1], FMAX):
                    nisa.bn_stats(dst=stats[:, 6 * j:6 * j + 6], data=flat[:, k0:k0 + kn])
                    j += 1
            mv = nl.ndarray((cs, 2), dtype=F32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=mv, data=stats)
            mean, var = mv[:, 0:1], mv[:, 1:2]
            invstd = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
            nisa.activation(dst=invstd, op=ActFunc.rsqrt, data=var, bias=eps)
            store_column(save_mean, c0, _cast(mean, save_mean.dtype))
            store_column(save_invstd, c0, _cast(invstd, save_invstd.dtype))
            if rm is not None:
                _update(rm, c0, mean, momentum)
            if rv is not None:
                unbiased = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
                count = n * s
                nisa.tensor_scalar(dst=unbiased, data=var, op0=A.multiply, operand0=count / max(count - 1, 1))
                _update(rv, c0, unbiased, momentum)
        else:
            mean = column(rm, c0, cs)
            invstd = column(rv, c0, cs)
            nisa.activation(dst=invstd, op=ActFunc.rsqrt, data=invstd, bias=eps)
        alpha, beta = _scale_shift(invstd, mean, None if w is None else column(w, c0, cs),
                                   None if b is None else column(b, c0, cs))
        for i in nl.affine_range(len(blks)):
            n0, nb, s0, sn = blks[i]
            xt = xs.block(i)
            yt = nl.ndarray((cs, nb, sn), dtype=y.dtype, buffer=nl.sbuf)
            nisa.activation(dst=yt, op=ActFunc.identity, data=xt, scale=alpha, bias=beta)
            nisa.dma_copy(dst=y[n0:n0 + nb, c0:c0 + cs, s0:s0 + sn].permute((1, 0, 2)), src=yt)


def _cast(t, dtype):
    if t.dtype == dtype:
        return t
    out = nl.ndarray(t.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=t)
    return out


# ---------------------------------------------------------------- backward


def batch_norm_backward(*views, has, want, training, eps):
    P = nl.tile_size.pmax
    views = list(views)
    outs = {k: views.pop(0) for k in ("dx", "dw", "db") if want[k]}
    dy, x = as_ncs(views.pop(0)), as_ncs(views.pop(0))
    w, mean_v, invstd_v = (views.pop(0) if has[k] else None for k in ("w", "mean", "invstd"))
    dx = as_ncs(outs["dx"]) if want["dx"] else None
    n, c, s = x.shape
    count = n * s
    blks = blocks(n, s, 4)
    resident = want["dx"] and training and n * s * max(x.dtype.itemsize, dy.dtype.itemsize) <= RESIDENT_BYTES
    for c0, cs in _chunks(c, P):
        xs, dys = Channels(x, c0, cs, blks, resident), Channels(dy, c0, cs, blks, resident)
        mean, invstd = column(mean_v, c0, cs), column(invstd_v, c0, cs)
        if not training:  # the running statistics: invstd from the variance
            nisa.activation(dst=invstd, op=ActFunc.rsqrt, data=invstd, bias=eps)
        neg_mean = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_mean, data=mean, op0=A.multiply, operand0=-1.0)
        sum_dy = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
        dot = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
        for i in range(len(blks)):
            xt, dyt = xs.block(i), dys.block(i)
            part = sum_dy if i == 0 else nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
            junk = nl.ndarray(dyt.shape, dtype=F32, buffer=nl.sbuf)
            nisa.activation(dst=junk, op=ActFunc.copy, data=dyt, reduce_res=part)
            prod = nl.ndarray(dyt.shape, dtype=F32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=prod, data=xt, op0=A.add, operand0=neg_mean, op1=A.multiply,
                                      operand1=dyt)
            dpart = dot if i == 0 else nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=dpart, op=A.add, data=_flat(prod), axis=1)
            if i:
                nisa.tensor_tensor(dst=sum_dy, data1=sum_dy, data2=part, op=A.add, engine=nisa.engine.gpsimd)
                nisa.tensor_tensor(dst=dot, data1=dot, data2=dpart, op=A.add)
        if want["dw"]:
            gw = nl.ndarray((cs, 1), dtype=outs["dw"].dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=gw, data1=dot, data2=invstd, op=A.multiply)
            store_column(outs["dw"], c0, gw)
        if want["db"]:
            store_column(outs["db"], c0, _cast(sum_dy, outs["db"].dtype))
        if not want["dx"]:
            continue
        scale = invstd  # s = invstd * w
        if w is not None:
            scale = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=scale, data1=invstd, data2=column(w, c0, cs), op=A.multiply)
        if training:
            xk, shift = _input_terms(dot, sum_dy, mean, invstd, scale, count)
        for i in nl.affine_range(len(blks)):
            n0, nb, s0, sn = blks[i]
            dyt = dys.block(i)
            res = nl.ndarray((cs, nb, sn), dtype=dx.dtype, buffer=nl.sbuf)
            if training:
                t = nl.ndarray((cs, nb, sn), dtype=F32, buffer=nl.sbuf)
                nisa.activation(dst=t, op=ActFunc.identity, data=xs.block(i), scale=xk, bias=shift)
                nisa.scalar_tensor_tensor(dst=res, data=dyt, op0=A.multiply, operand0=scale, op1=A.add,
                                          operand1=t)
            else:
                nisa.activation(dst=res, op=ActFunc.identity, data=dyt, scale=scale)
            nisa.dma_copy(dst=dx[n0:n0 + nb, c0:c0 + cs, s0:s0 + sn].permute((1, 0, 2)), src=res)


def _input_terms(dot, sum_dy, mean, invstd, scale, count):
    """``-k * s`` and ``(mean * k - sum(dy) / n) * s`` with ``k = dot * invstd^2 / n``."""
    cs = dot.shape[0]
    k = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=k, data=dot, op0=A.multiply, operand0=invstd, op1=A.multiply,
                              operand1=invstd)
    nisa.tensor_scalar(dst=k, data=k, op0=A.divide, operand0=float(count))
    xk = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=xk, data=k, op0=A.multiply, operand0=-1.0, op1=A.multiply, operand1=scale)
    shift = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
    grad_mean = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=grad_mean, data=sum_dy, op0=A.divide, operand0=float(count))
    nisa.tensor_tensor(dst=shift, data1=mean, data2=k, op=A.multiply)
    nisa.tensor_tensor(dst=shift, data1=shift, data2=grad_mean, op=A.subtract)
    nisa.tensor_tensor(dst=shift, data1=shift, data2=scale, op=A.multiply)
    return xk, shift


# ---------------------------------------------------------------- planners


def spatial_merges(t) -> bool:
    """Whether ``t``'s dims after the second are walked as one (so ``as_ncs`` can merge them)."""
    expect = None
    for size, stride in reversed(list(zip(t.shape[2:], t.stride()[2:], strict=True))):
        if size == 1:
            continue
        if expect is not None and stride != expect:
            return False
        expect = stride * size
    return True


def _channel_param(t, c) -> bool:
    return t is None or (t.dim() == 1 and t.numel() == c and t.dtype in FLOAT_DTYPES)


def _position(call: Call, t) -> int:
    return next(i for i, u in enumerate(call.inputs) if u is t)


@native("aten::native_batch_norm.default")
def plan_batch_norm(call: Call) -> Launch | None:
    names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
    x, w, b, rm, rv, training, momentum, eps = (call.arg(i, nm) for i, nm in enumerate(names))
    y = call.outputs[0]
    if x.dtype not in FLOAT_DTYPES or x.dim() < 2 or y.dtype != x.dtype or not spatial_merges(x):
        return None
    c = x.shape[1]
    if not all(_channel_param(t, c) for t in (w, b, rm, rv)) or not spatial_merges(y):
        return None
    if x.numel() // c > MAX_VALUES or not math.isfinite(eps) or (training and x.numel() // c < 2):
        return None
    if not training and (rm is None or rv is None):
        return None
    momentum = 0.0 if momentum is None else float(momentum)
    params = [t for t in (w, b, rm, rv) if t is not None]
    has = {"w": w is not None, "b": b is not None, "rm": rm is not None, "rv": rv is not None}
    statics = {"has": has, "training": bool(training), "momentum": momentum, "eps": float(eps)}
    operands = (OUT(0), OUT(1), OUT(2), IN(0), *(IN(_position(call, t)) for t in params))
    # Eval: ATen-CPU returns empty save_mean / save_invstd (the meta kernel: [C]); the Program runs
    # under fast numerics too (Launch.result), so running_mean / running_var are its to update.
    result = tuple if training else (lambda outs: (outs[0], outs[1][:0], outs[2][:0]))
    # save_mean / save_invstd: ATen-CPU's dtype (the input's, fp32 if a parameter is fp32 while the
    # input is 16-bit), where the meta kernel says fp32.
    mixed = x.dtype != torch.float32 and any(t.dtype == torch.float32 for t in params)
    saved = torch.float32 if mixed else x.dtype
    return Launch(batch_norm, operands, statics, flops=float(x.numel() * (6 if training else 2)),
                  result=result, output_dtypes=(y.dtype, saved, saved))


@native("aten::native_batch_norm_backward.default")
def plan_batch_norm_backward(call: Call) -> Launch | None:
    names = ("grad_out", "input", "weight", "running_mean", "running_var", "save_mean", "save_invstd",
             "train", "eps", "output_mask")
    dy, x, w, rm, rv, sm, si, training, eps, mask = (call.arg(i, nm) for i, nm in enumerate(names))
    want = dict(zip(("dx", "dw", "db"), map(bool, mask), strict=True))
    if len(call.outputs) != sum(want.values()) or not any(want.values()):
        return None
    if x.dtype not in FLOAT_DTYPES or dy.dtype != x.dtype or dy.shape != x.shape or x.dim() < 2:
        return None
    if not (spatial_merges(x) and spatial_merges(dy) and all(spatial_merges(o) or o.dim() == 1
                                                              for o in call.outputs)):
        return None
    c = x.shape[1]
    mean, invstd = (sm, si) if training else (rm, rv)
    if mean is None or invstd is None or not all(_channel_param(t, c) for t in (w, mean, invstd)):
        return None
    if (want["dw"] and w is None) or x.numel() // c > MAX_VALUES or not math.isfinite(eps):
        return None
    has = {"w": w is not None, "mean": True, "invstd": True}
    ins = [t for t in (dy, x, w, mean, invstd) if t is not None]
    return Launch(batch_norm_backward, (*(OUT(i) for i in range(len(call.outputs))),
                                        *(IN(_position(call, t)) for t in ins)),
                  {"has": has, "want": want, "training": bool(training), "eps": float(eps)},
                  flops=float(x.numel() * 8),
                  result=None if all(want.values()) else (lambda outs: _masked(outs, want)))


def _masked(outs, want) -> tuple:
    it = iter(outs)
    return tuple(next(it) if want[k] else None for k in ("dx", "dw", "db"))

