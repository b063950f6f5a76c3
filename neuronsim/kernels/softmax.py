"""Softmax and log-softmax along one dim, forward and backward, as a real NKI softmax runs them.

Rows go on the partitions (128 per tile); the softmax dim is the free dim. Per row tile:

- forward: the row max (VectorE ``tensor_reduce``, negated), ``exp(x - max)`` and its row sum in one
  ScalarE ``activation`` (the -max is the bias, the sum the accumulate), then softmax scales by the
  reciprocal of the sum (VectorE), log-softmax subtracts ``log(sum)`` (ScalarE log, one VectorE
  ``tensor_scalar`` with two [P, 1] operands: ``(x - max) - log(sum)``, ATen's order);
- backward: the row dot ``sum(g * y)`` (softmax) or ``sum(g)`` (log-softmax) on VectorE, then
  ``y * (g - dot)`` or ``g - exp(y) * sum`` (ScalarE exp, one VectorE ``scalar_tensor_tensor``).

A row that fits ``ROW_BUDGET_BYTES`` per partition stays in SBUF between the passes; a longer one
is streamed in ``CHUNK`` columns per pass (reloaded by DMA, exp recomputed) with the max and sum
combined across chunks. Masked rows behave as ATen's: ``-inf`` entries give 0 (log: ``-inf``), a
fully masked row gives NaN (``-inf - -inf``). The softmax dim may be any dim: the access patterns
walk it with its stride (rows on partitions along the innermost row dim), so no copy is needed.

Floats compute in fp32 and round once on the write (bf16 in, bf16 out, as ATen's opmath).
``half_to_float`` (fp16 in, fp32 out) and mixed-dtype backward calls fall back.
"""

from __future__ import annotations

import itertools
import math

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import PARTITIONS, coalesce
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
ROW_BUDGET_BYTES = 96 * 1024  # per partition for a resident row (leaves room for double buffering)
CHUNK = 4096  # columns per instruction and DMA when a row is streamed: 16 KiB of fp32
MAX_STEPS = 1024  # row tiles x chunks; past this (tiny awkward dims) the op falls back


# ---------------------------------------------------------------- rows and chunks


class RowTile:
    """``p`` rows of every view: ``cols(k, c0, n)`` is view ``k``'s ``[p, n]`` HBM access pattern.

    A view's rows are one partition walk, or two nested ones (``p_patterns[k]``: (step, count)
    pairs) when the innermost row dim is short: [T, T] attention rows of many heads fill the
    partitions with 128 // T heads at a time instead of T rows per tile."""

    def __init__(self, views, p, offsets, p_patterns, c_steps):
        self.views, self.p, self.offsets = views, p, offsets
        self.p_patterns, self.c_steps = p_patterns, c_steps

    def cols(self, k, c0, n):
        v = self.views[k]
        step = self.c_steps[k]
        return v.ap([*map(list, self.p_patterns[k]), [step, n]], offset=self.offsets[k] + c0 * step)


def row_tiles(views, dim: int) -> list[RowTile]:
    """Same-shape views cut into row tiles (every index but ``dim``), rows coalesced like ATen's
    TensorIterator so contiguous leading dims are one partition walk; a short innermost row dim
    is grouped with the next one's (two-level partition patterns)."""
    c_steps = [v.dims[dim][0] for v in views]
    sizes, steps = coalesce([v.dims[:dim] + v.dims[dim + 1:] for v in views])
    if not sizes:
        sizes, steps = (1,), [[0] for _ in views]
    inner = sizes[-1]
    group = min(PARTITIONS // inner, sizes[-2]) if inner < PARTITIONS and len(sizes) >= 2 else 1
    looped = sizes[:-2] if group > 1 else sizes[:-1]
    tiles = []
    for idx in itertools.product(*(range(n) for n in looped)):
        base = [v.offset + sum(i * s for i, s in zip(idx, st, strict=False))
                for v, st in zip(views, steps, strict=True)]
        if group > 1:
            for q0 in range(0, sizes[-2], group):
                g = min(group, sizes[-2] - q0)
                offsets = [b + q0 * st[-2] for b, st in zip(base, steps, strict=True)]
                tiles.append(RowTile(views, g * inner, offsets,
                                     [((st[-2], g), (st[-1], inner)) for st in steps], c_steps))
            continue
        for p0 in range(0, inner, PARTITIONS):
            p = min(PARTITIONS, inner - p0)
            tiles.append(RowTile(views, p, [b + p0 * st[-1] for b, st in zip(base, steps, strict=True)],
                                 [((st[-1], p),) for st in steps], c_steps))
    return tiles


def _plan_rows(views, dim: int, bytes_per_column: int):
    """(row tiles, column chunks, whether a row stays resident in SBUF)."""
    n = views[0].shape[dim]
    resident = n * bytes_per_column <= ROW_BUDGET_BYTES
    step = n if resident else CHUNK
    chunks = [(c0, min(step, n - c0)) for c0 in range(0, n, step)]
    rows = row_tiles(views, dim)
    if len(rows) * len(chunks) > MAX_STEPS:
        raise Declined(f"{len(rows)} row tiles x {len(chunks)} chunks")
    return rows, chunks, resident


class _Loader:
    """Loads view ``k``'s chunk of a row tile; resident rows are loaded once and kept."""

    def __init__(self, row: RowTile, resident: bool):
        self.row, self.resident, self.kept = row, resident, {}

    def __call__(self, k, c0, n):
        if (k, c0) in self.kept:
            return self.kept[(k, c0)]
        view = self.row.views[k]
        t = nl.ndarray((self.row.p, n), dtype=view.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=self.row.cols(k, c0, n))
        if self.resident:
            self.kept[(k, c0)] = t
        return t


def _col(p):
    return nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)


def _row_reduce(acc, data, op, first, negate=False):
    """``acc (op)= reduce(data)`` over the free dim; ``first`` writes ``acc`` directly."""
    if first:
        nisa.tensor_reduce(dst=acc, op=op, data=data, axis=1, negate=negate)
        return
    part = _col(acc.shape[0])
    nisa.tensor_reduce(dst=part, op=op, data=data, axis=1, negate=negate)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=A.minimum if negate else op)  # -max = min of -


# ---------------------------------------------------------------- kernels


def softmax_fwd(out, x, dim, log):
    rows, chunks, resident = _plan_rows([out, x], dim, x.dtype.itemsize + 4)
    for i in nl.affine_range(len(rows)):
        row = rows[i]
        load = _Loader(row, resident)
        softmax_row(row.p, chunks, resident, lambda c0, n, load=load: load(1, c0, n),
                    lambda c0, n, y, row=row: nisa.dma_copy(dst=row.cols(0, c0, n), src=y), log, out.dtype)


def softmax_row(p, chunks, resident, x_of, y_to, log, dtype):
    """One row tile of ``p`` rows: ``x_of(c0, n)`` gives x's chunk in SBUF, ``y_to(c0, n, y)`` takes
    the result's chunk (of ``dtype``). The kernel above loads and stores; a fused region
    (``kernels/fused.py``) computes x by its point-wise prologue and sends y through its epilogue."""
    neg_max, total = _col(p), _col(p)
    for j, (c0, n) in enumerate(chunks):
        _row_reduce(neg_max, x_of(c0, n), A.maximum, j == 0, negate=True)
    exps = []
    for j, (c0, n) in enumerate(chunks):  # exp(x - max) and its row sum, one ScalarE pass
        e = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=ActFunc.exp, data=x_of(c0, n), bias=neg_max, reduce_op=A.add,
                        reduce_res=total, reduce_cmd="reset_reduce" if j == 0 else "reduce")
        if resident and not log:
            exps.append(e)
    scale = _col(p)
    if log:
        nisa.activation(dst=scale, op=ActFunc.log, data=total)
    else:
        nisa.reciprocal(dst=scale, data=total)
    for j, (c0, n) in enumerate(chunks):
        y = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
        if log:
            nisa.tensor_scalar(dst=y, data=x_of(c0, n), op0=A.add, operand0=neg_max, op1=A.subtract,
                               operand1=scale)
        else:
            if exps:
                e = exps[j]
            else:  # streamed: recompute the chunk's exp rather than spill it to HBM
                e = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
                nisa.activation(dst=e, op=ActFunc.exp, data=x_of(c0, n), bias=neg_max)
            nisa.tensor_scalar(dst=y, data=e, op0=A.multiply, operand0=scale)
        y_to(c0, n, y)


def softmax_bwd(grad_in, grad, y, dim, log):
    """softmax: ``y * (g - sum(g * y))``; log-softmax: ``g - exp(y) * sum(g)``."""
    rows, chunks, resident = _plan_rows([grad_in, grad, y], dim, grad.dtype.itemsize + y.dtype.itemsize + 4)
    for i in nl.affine_range(len(rows)):
        row = rows[i]
        load = _Loader(row, resident)
        softmax_bwd_row(row.p, chunks, lambda c0, n, load=load: load(1, c0, n),
                        lambda c0, n, load=load: load(2, c0, n),
                        lambda c0, n, dx, row=row: nisa.dma_copy(dst=row.cols(0, c0, n), src=dx),
                        log, grad_in.dtype)


def softmax_bwd_row(p, chunks, g_of, y_of, dx_to, log, dtype):
    """One row tile of the backward: chunks of g and y from ``g_of``/``y_of``, dx (of ``dtype``)
    to ``dx_to`` (hooks as in :func:`softmax_row`)."""
    dot = _col(p)
    for j, (c0, n) in enumerate(chunks):
        g = g_of(c0, n)
        if log:
            _row_reduce(dot, g, A.add, j == 0)
        else:
            gy = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=gy, data1=g, data2=y_of(c0, n), op=A.multiply)
            _row_reduce(dot, gy, A.add, j == 0)
    for c0, n in chunks:
        g, yc = g_of(c0, n), y_of(c0, n)
        dx = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
        if log:
            e = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
            nisa.activation(dst=e, op=ActFunc.exp, data=yc)
            nisa.scalar_tensor_tensor(dst=dx, data=e, op0=A.multiply, operand0=dot, op1=A.subtract,
                                      operand1=g, reverse1=True)
        else:
            nisa.scalar_tensor_tensor(dst=dx, data=g, op0=A.subtract, operand0=dot, op1=A.multiply,
                                      operand1=yc)
        dx_to(c0, n, dx)


# ---------------------------------------------------------------- planners


def _dim(call: Call, pos: int, ndim: int) -> int | None:
    d = call.arg(pos, "dim")
    if not isinstance(d, int) or ndim == 0 or not -ndim <= d < ndim:
        return None
    return d % ndim


@native("aten::_softmax.default", "aten::_log_softmax.default")
def plan_softmax(call: Call) -> Launch | None:
    x, out = call.inputs[0], call.outputs[0]
    dim = _dim(call, 1, x.dim())
    if dim is None or call.arg(2, "half_to_float") or x.dtype not in FLOAT_DTYPES or out.dtype != x.dtype:
        return None
    log = call.op.name() == "aten::_log_softmax"
    return Launch(softmax_fwd, (OUT(0), IN(0)), {"dim": dim, "log": log}, flops=5.0 * math.prod(x.shape))


@native("aten::_softmax_backward_data.default", "aten::_log_softmax_backward_data.default")
def plan_softmax_backward(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    grad, y = call.inputs
    out = call.outputs[0]
    dim = _dim(call, 2, grad.dim())
    same = grad.dtype == y.dtype == out.dtype == call.arg(3, "input_dtype")
    if dim is None or not same or grad.dtype not in FLOAT_DTYPES or grad.shape != y.shape:
        return None
    log = call.op.name() == "aten::_log_softmax_backward_data"
    return Launch(softmax_bwd, (OUT(0), IN(0), IN(1)), {"dim": dim, "log": log},
                  flops=4.0 * math.prod(grad.shape))
