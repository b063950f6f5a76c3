"""Negative log-likelihood: ``nll_loss_forward`` and ``nll_loss_backward`` (cross-entropy's second
half, after ``_log_softmax``).

Rows (samples) go on the partitions, 128 per tile; the classes lie along the free axis, walked in
``CHUNK`` columns. A row's target is a per-partition scalar (its int64's low word, DMA'd as fp32;
see ``indexing.IndexWords``), so picking ``x[n, target[n]]`` without a gather is a VectorE compare
of a class ``iota`` with the target, then a ``select`` of ``x`` where it matches (0 elsewhere)
summed along the free dim: exact, and NaN/inf in the other classes do not leak in. Ignored rows
get target -1, which matches no class. The backward writes ``-w[t] * g (/ total_weight)`` through
the same mask with a ``select``, zeros elsewhere.

The mean and sum reductions add ``(-x[n, t] * w[t], w[t])`` across rows, i.e. across partitions:
TensorE contracts over them (``ones.T @ [loss, weight]``, accumulating into one PSUM row over row
tiles, fp32), and VectorE divides once. Targets out of range run on the host (``Launch.admit``),
where ATen raises its own error. Covered: fp32/bf16/fp16 ``[N, C]`` or ``[C]`` inputs, int64
targets (int32 ones raise in ATen), with or without a class weight, every reduction, any ``ignore_index``.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.indexing import IndexWords, indices_within
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import PARTITIONS
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
P = PARTITIONS
CHUNK = 2048  # classes per instruction: 8 KiB of fp32 per partition
MAX_STEPS = 2048  # row tiles x class chunks
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}
CLASSES_MAX = 2**24  # class ids compare exactly in fp32 below this


class _Rows:
    """An ``[N, C]`` (or ``[C]``: one row) HBM view: ``tile(r0, p, c0, n)`` is its ``[p, n]`` pattern."""

    def __init__(self, view):
        dims = view.dims if len(view.shape) == 2 else ((0, 1), view.dims[0])
        (self.rstep, self.n), (self.cstep, self.c) = dims
        self.view = view

    def tile(self, r0, p, c0, n):
        offset = self.view.offset + r0 * self.rstep + c0 * self.cstep
        return self.view.ap([[self.rstep, p], [self.cstep, n]], offset=offset)


def _col(p, dtype=F32):
    return nl.ndarray((p, 1), dtype=dtype, buffer=nl.sbuf)


def _per_row(view, r0, p):
    """Rows ``r0 .. r0+p`` of a 1-D per-row view (its step) or a 0-dim one (broadcast) as [p, 1]."""
    step = view.dims[0][0] if math.prod(view.shape) > 1 else 0  # a 0-dim view is [1]
    t = _col(p)
    nisa.dma_copy(dst=t, src=view.ap([[step, p], [1, 1]], offset=view.offset + r0 * step))
    return t


def _classes(c):
    return [(c0, min(CHUNK, c - c0)) for c0 in range(0, c, CHUNK)]


def _targets(words, r0, p, ignore_index):
    """The rows' targets as fp32 [p, 1]; ignored rows get -1 (no class) and ``valid`` 0."""
    t = words.column(r0, p)
    valid = _col(p, nl.uint8)
    nisa.tensor_scalar(dst=valid, data=t, op0=A.not_equal, operand0=float(ignore_index))
    eff = _col(p)
    nisa.select_reduce(dst=eff, predicate=valid, on_true=t, on_false=-1.0)
    return eff, valid


class _Picker:
    """``pick(tile, c0, n)`` adds ``tile[r, target[r] - c0]`` (0 if it is not in the chunk) to a
    per-row sum, for the values and, with a class weight, the weights."""

    def __init__(self, iota, target, p):
        self.iota, self.target, self.p = iota, target, p
        self.masks = {}

    def mask(self, c0, n):
        if c0 not in self.masks:
            shifted = _col(self.p)
            nisa.tensor_scalar(dst=shifted, data=self.target, op0=A.subtract, operand0=float(c0))
            m = nl.ndarray((self.p, n), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=m, data=self.iota[:self.p, :n], op0=A.equal, operand0=shifted)
            self.masks[c0] = m
        return self.masks[c0]

    def pick(self, acc, data, c0, n, first):
        sel = nl.ndarray((self.p, n), dtype=F32, buffer=nl.sbuf)
        dst = acc if first else _col(self.p)
        nisa.select_reduce(dst=sel, predicate=self.mask(c0, n), on_true=data, on_false=0.0, reduce_res=dst,
                           reduce_op=A.add)
        if not first:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=dst, op=A.add)


def _class_iota(p, c):
    t = nl.ndarray((p, min(CHUNK, c)), dtype=F32, buffer=nl.sbuf)
    nisa.iota(t, pattern=[[1, min(CHUNK, c)]], offset=0, channel_multiplier=0)
    return t


def _weight_chunk(weight, p, c0, n):
    t = nl.ndarray((p, n), dtype=weight.dtype, buffer=nl.sbuf)
    step = weight.dims[0][0]
    nisa.dma_copy(dst=t, src=weight.ap([[0, p], [step, n]], offset=weight.offset + c0 * step))
    return t


def _row_tiles(n):
    return [(r0, min(P, n - r0)) for r0 in range(0, n, P)]


def _walk(x, target, weight, wide):
    """(rows of ``x``, target words, the class weight or None, row tiles, class chunks, class
    iota): what the forward and backward kernels walk."""
    rows, words = _Rows(x), IndexWords(target, wide)
    tiles, chunks = _row_tiles(rows.n), _classes(rows.c)
    if len(tiles) * len(chunks) > MAX_STEPS or words.count != rows.n:
        raise Declined("too many steps")
    return rows, words, weight[0] if weight else None, tiles, chunks, _class_iota(min(P, rows.n), rows.c)


# ---------------------------------------------------------------- forward


def nll_forward(out, total_weight, x, target, *weight, wide, reduction, ignore_index):
    rows, words, weight, tiles, chunks, iota = _walk(x, target, weight, wide)
    if reduction != "none":
        ones = nl.ones((min(P, rows.n), 1), dtype=F32, buffer=nl.sbuf)
        sums = nl.ndarray((1, 2), dtype=F32, buffer=nl.psum)  # (sum of -x[t] * w[t], sum of w[t])
    for r0, p in tiles:
        target_col, valid = _targets(words, r0, p, ignore_index)
        picker = _Picker(iota, target_col, p)
        picked = _col(p)
        w_t = _col(p)
        for j, (c0, n) in enumerate(chunks):
            xt = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt, src=rows.tile(r0, p, c0, n))
            picker.pick(picked, xt, c0, n, j == 0)
            if weight is not None:
                picker.pick(w_t, _weight_chunk(weight, p, c0, n), c0, n, j == 0)
        if weight is None:
            nisa.tensor_copy(dst=w_t, src=valid)  # 1.0, or 0.0 for an ignored row
        vals = nl.ndarray((p, 2), dtype=F32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=vals[:, 0:1], data=picked, op0=A.multiply, operand0=-1.0,
                                  op1=A.multiply, operand1=w_t)
        nisa.tensor_copy(dst=vals[:, 1:2], src=w_t)
        if reduction == "none":
            res = _col(p, out.dtype)
            nisa.tensor_copy(dst=res, src=vals[:, 0:1])
            step = out.dims[0][0] if len(out.shape) else 0
            nisa.dma_copy(dst=out.ap([[step, p], [1, 1]], offset=out.offset + r0 * step), src=res)
        else:
            nisa.nc_matmul(dst=sums, stationary=ones[:p], moving=vals)
    tw = nl.ndarray((1, 1), dtype=total_weight.dtype, buffer=nl.sbuf)
    if reduction == "none":  # ATen's total_weight: the row's weight for a [C] input, else 0
        if len(x.shape) == 1:
            nisa.tensor_copy(dst=tw, src=vals[:, 1:2])
        else:
            nisa.memset(tw, 0.0)
        nisa.dma_copy(dst=total_weight.ap([[1, 1], [1, 1]], offset=total_weight.offset), src=tw)
        return
    acc = nl.ndarray((1, 2), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc, src=sums)
    res = nl.ndarray((1, 1), dtype=out.dtype, buffer=nl.sbuf)
    if reduction == "mean":  # 0 / 0 = NaN when every row is ignored, as ATen
        nisa.tensor_scalar(dst=res, data=acc[:, 0:1], op0=A.divide, operand0=acc[:, 1:2])
    else:
        nisa.tensor_copy(dst=res, src=acc[:, 0:1])
    nisa.tensor_copy(dst=tw, src=acc[:, 1:2])
    nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], offset=out.offset), src=res)
    nisa.dma_copy(dst=total_weight.ap([[1, 1], [1, 1]], offset=total_weight.offset), src=tw)


# ---------------------------------------------------------------- backward


def nll_backward(grad_in, grad_out, target, total_weight, *weight, wide, reduction, ignore_index):
    """``grad_in[n, t] = w[t] * -(g / total_weight)`` (mean) or ``w[t] * -g``, ATen's order; 0 elsewhere."""
    rows, words, weight, tiles, chunks, iota = _walk(grad_in, target, weight, wide)
    for r0, p in tiles:
        target_col, _ = _targets(words, r0, p, ignore_index)
        picker = _Picker(iota, target_col, p)
        g = _per_row(grad_out, r0, p)  # 0-dim for mean/sum: broadcast to every row
        coef = _col(p)
        if reduction == "mean":
            tw = _per_row(total_weight, 0, p)
            nisa.tensor_scalar(dst=coef, data=g, op0=A.divide, operand0=tw, op1=A.multiply, operand1=-1.0)
        else:
            nisa.tensor_scalar(dst=coef, data=g, op0=A.multiply, operand0=-1.0)
        if weight is not None:
            w_t = _col(p)
            for j, (c0, n) in enumerate(chunks):
                picker.pick(w_t, _weight_chunk(weight, p, c0, n), c0, n, j == 0)
            nisa.tensor_tensor(dst=coef, data1=w_t, data2=coef, op=A.multiply)
        for c0, n in chunks:
            mask = picker.mask(c0, n)
            gt = nl.ndarray((p, n), dtype=grad_in.dtype, buffer=nl.sbuf)
            # mask ? coef : mask (0 where it is false)
            nisa.select_reduce(dst=gt, predicate=mask, on_true=mask, on_false=coef, reverse_pred=True)
            nisa.dma_copy(dst=rows.tile(r0, p, c0, n), src=gt)


# ---------------------------------------------------------------- planners


def _shapes_ok(x, target, weight) -> bool:
    if x.dtype not in FLOAT_DTYPES or target.dtype is not torch.int64 or x.dim() not in (1, 2):  # ATen's rule
        return False
    c = x.shape[-1]
    if target.numel() != (x.shape[0] if x.dim() == 2 else 1) or not 0 < c < CLASSES_MAX:
        return False
    return weight is None or (weight.dim() == 1 and weight.numel() == c and weight.dtype in FLOAT_DTYPES)


def _admit(c: int, ignore_index: int, target_pos: int):
    def admit(inputs):
        return indices_within(inputs[target_pos], c, ignore_index)

    return admit


def _positions(call: Call, *ts) -> list[int] | None:
    """Indices of the tensors ``ts`` among the call's device inputs (None entries skipped); None
    if one is not a device tensor."""
    found = []
    for t in ts:
        if t is not None:
            i = next((i for i, u in enumerate(call.inputs) if u is t), None)
            if i is None:
                return None
            found.append(i)
    return found


@native("aten::nll_loss_forward.default")
def plan_nll_forward(call: Call) -> Launch | None:
    x, target, weight = call.arg(0, "self"), call.arg(1, "target"), call.arg(2, "weight")
    reduction, ignore_index = REDUCTIONS.get(call.arg(3, "reduction")), call.arg(4, "ignore_index")
    out, total_weight = call.outputs
    found = _positions(call, x, target, weight)
    if reduction is None or found is None or not _shapes_ok(x, target, weight) or out.dtype != x.dtype:
        return None
    statics = {"wide": target.dtype is torch.int64, "reduction": reduction, "ignore_index": ignore_index}
    return Launch(nll_forward, (OUT(0), OUT(1), *map(IN, found)), statics, flops=3.0 * x.numel(),
                  admit=_admit(x.shape[-1], ignore_index, found[1]))


@native("aten::nll_loss_backward.default")
def plan_nll_backward(call: Call) -> Launch | None:
    g, x, target, weight = (call.arg(i, n) for i, n in enumerate(("grad_output", "self", "target", "weight")))
    reduction, ignore_index = REDUCTIONS.get(call.arg(4, "reduction")), call.arg(5, "ignore_index")
    total_weight = call.arg(6, "total_weight")
    out = call.outputs[0]
    found = _positions(call, g, target, total_weight, weight)
    if (
        reduction is None or found is None or not _shapes_ok(x, target, weight) or out.dtype != x.dtype
        or tuple(out.shape) != tuple(x.shape) or g.dtype not in FLOAT_DTYPES
        or g.numel() != (target.numel() if reduction == "none" else 1) or g.dim() > 1
        or total_weight.numel() != 1 or total_weight.dim() != 0
    ):
        return None
    statics = {"wide": target.dtype is torch.int64, "reduction": reduction, "ignore_index": ignore_index}
    return Launch(nll_backward, (OUT(0), *map(IN, found)), statics, flops=2.0 * math.prod(x.shape),
                  admit=_admit(x.shape[-1], ignore_index, found[1]))
