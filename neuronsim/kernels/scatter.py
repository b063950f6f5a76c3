"""Scatters that combine, in ATen-CPU's order: ``scatter`` / ``scatter_add`` along a dim,
``index_put_(accumulate=True)`` (``index_add``-style row sums: MoE experts' outputs added back to
their tokens) and ``histc`` (tokens per expert).

ATen-CPU runs these serially: ``out[idx[j]] += src[j]`` for j in order (``index_put_`` rounds to
a 16-bit dtype after each addition, ``scatter_add`` sums in fp32 and rounds once), and a later
write wins in ``scatter``. The kernels keep that order exactly, on VectorE, so every dtype and
duplicate pattern is bit-exact:

- ``scatter`` / ``scatter_add``: the rows (every index but ``dim``) on the partitions, the row of
  ``self`` along the free axis. For each source column j in order: a compare of a column iota with
  ``index[:, j]`` gives the mask of the slot it names; ``scatter_add`` adds ``src[:, j]`` (DMA'd
  broadcast along the row, bits exact) to the row and ``tensor_copy_predicated`` keeps the sum
  only in that slot; ``scatter`` copies ``src[:, j]`` in. A select, not a multiply-add: no
  ``0 * inf``, and ``-0.0`` slots nothing is added to stay ``-0.0``.
- ``index_put_(accumulate=True)`` with index tensors on the leading dims: the indexed rows of
  ``self`` on the partitions, each row's elements along the free axis; for each index n in order,
  ``values[n]`` DMA'd to every partition, added, and kept on the partition ``index[n]`` names (a
  partition iota compared with it).
- ``histc``: the bins on the partitions, the elements along the free axis of each (a stride-0
  DMA). ATen-CPU's bin is ``(x - min) * bins / (max - min)`` in fp32 rounded at each step,
  truncated, the top edge in the last bin, elements outside ``[min, max]`` (and NaN) left out; the
  kernel computes the same fp32 quotient and counts ``lower <= q < upper`` per bin. Integer
  inputs (which ATen-CPU refuses) follow CUDA's integer formula, which the same quotient gives
  exactly while ``(max - min) * bins < 2**24``.

Not covered (host): other ``scatter_reduce`` modes, index tensors of different shapes or not on
the leading dims, or a broadcast values tensor in ``index_put_``, more than ``MAX_STEPS`` column steps.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES, numpy_dtype
from neuronsim.kernels.indexing import IndexWords, indices_within
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.softmax import row_tiles
from neuronsim.kernels.tiling import PARTITIONS, coalesce
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
P = PARTITIONS
MAX_STEPS = 4096  # per-column steps (each a few VectorE instructions) of one Program
ROW_MAX = 8192  # elements of a row kept in SBUF
BROADCAST_MAX = 16384  # elements per partition of a broadcast source tile
HIST_CHUNK = 4096  # elements per partition per histc step
EXACT = 2**24
SCATTER_DTYPES = (*FLOAT_DTYPES, torch.int32, torch.int16, torch.int8, torch.uint8)


def _tile(shape, dtype=F32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _low_words(view):
    return view.ap([list(d) for d in view.dims[:-1]], offset=view.offset)


# ---------------------------------------------------------------- scatter / scatter_add


def scatter_kernel(out, x, index, src, *, dim, add):
    """``out = x`` with ``src[.., j, ..]`` written (added) at ``index[.., j, ..]`` along ``dim``."""
    ids = _low_words(index)
    k, n = ids.shape[dim], x.shape[dim]
    # out and x restricted to the index's extent in the other dims (scatter allows a smaller index)
    xr, outr = ([list(d) if i == dim else [d[0], m]
                 for i, (d, m) in enumerate(zip(v.dims, ids.shape, strict=True))]
                for v in (x, out))
    views = [out.ap(outr, offset=out.offset), x.ap(xr, offset=x.offset), ids, src]
    rows = row_tiles(views, dim)
    if len(rows) * k > MAX_STEPS or n > ROW_MAX:
        raise Declined("too many steps")
    per_load = max(1, min(k, BROADCAST_MAX // n))
    cols = _tile((min(P, rows[0].p), n))
    nisa.iota(cols, [[1, n]])
    for r in nl.affine_range(len(rows)):
        row = rows[r]
        p = row.p
        acc = _tile((p, n), F32 if add else x.dtype)  # scatter_add: fp32 sums (ATen's opmath), rounded once
        if acc.dtype == x.dtype:
            nisa.dma_copy(dst=acc, src=row.cols(1, 0, n))
        else:
            start = _tile((p, n), x.dtype)
            nisa.dma_copy(dst=start, src=row.cols(1, 0, n))
            nisa.tensor_copy(acc, start)
        where = _tile((p, k))
        nisa.dma_copy(dst=where, src=row.cols(2, 0, k))
        for j0 in range(0, k, per_load):
            m = min(per_load, k - j0)
            step = row.c_steps[3]
            spread = _tile((p, m * n), src.dtype)  # src[:, j] repeated along the row, bits as they are
            nisa.dma_copy(dst=spread, src=src.ap([*map(list, row.p_patterns[3]), [step, m], [0, n]],
                                                 offset=row.offsets[3] + j0 * step))
            for j in range(m):
                value = spread[:, j * n:(j + 1) * n]
                hit = _tile((p, n), nl.uint8)
                nisa.tensor_scalar(hit, cols[:p], A.equal, where[:, j0 + j:j0 + j + 1])
                if add:
                    total = _tile((p, n))
                    nisa.tensor_tensor(total, acc, value, A.add)
                    value = total
                nisa.tensor_copy_predicated(acc, value, hit)
        if acc.dtype != x.dtype:
            rounded = _tile((p, n), x.dtype)
            nisa.tensor_copy(rounded, acc)
            acc = rounded
        nisa.dma_copy(dst=row.cols(0, 0, n), src=acc)


@native("aten::scatter.src", "aten::scatter_.src", "aten::scatter_add.default", "aten::scatter_add_.default")
def plan_scatter(call: Call) -> Launch | None:
    if len(call.inputs) != 3:
        return None
    x, index, src = call.inputs
    out = call.outputs[0]
    add = call.op.name().startswith("aten::scatter_add")
    if x.dtype not in SCATTER_DTYPES or src.dtype != x.dtype or out.dtype != x.dtype:
        return None
    if index.dtype is not torch.int64 or (add and x.dtype not in FLOAT_DTYPES):
        return None
    if x.dim() == 0 or index.dim() != x.dim() or src.dim() != x.dim():
        return None
    if call.kwargs.get("reduce") is not None:
        return None
    dim = call.arg(1, "dim") % x.dim()
    if any(index.shape[d] > src.shape[d] for d in range(x.dim())) or index.numel() == 0:
        return None
    if not call.op.name().endswith("_") and any(index.shape[d] != x.shape[d]
                                                for d in range(x.dim()) if d != dim % x.dim()):
        return None  # (a fresh output beyond the index's extent would need x copied in: the host's)
    n = x.shape[dim]

    def admit(inputs):
        return indices_within(inputs[1], n)

    # src is read over the index's extent (it may be larger): a view of it, shaped like index
    return Launch(_scatter_on_index_extent, (OUT(0), IN(0), IN(1), IN(2)), {"dim": dim, "add": add},
                  admit=admit, flops=float(index.numel()) * n)


def _scatter_on_index_extent(out, x, index, src, *, dim, add):
    shape = index.shape[:-1]  # (the index's word pairs: its last dim)
    src = src.ap([[d[0], m] for d, m in zip(src.dims, shape, strict=True)], offset=src.offset)
    scatter_kernel(out, x, index, src, dim=dim, add=add)


# ---------------------------------------------------------------- index_put_(accumulate=True)


def index_add_kernel(out, x, values, *indices, rows, block, steps, mults):
    """``out = x`` seen as ``[rows, block]``; for n in order, ``out[row(n)] += values[n]`` with
    ``row(n) = sum_j indices[j][n] * mults[j]`` (the indexed dims of ``x`` as one)."""
    (x_r, x_b), (o_r, o_b), (v_n, v_b) = steps
    words = [IndexWords(ix, True) for ix in indices]
    count = words[0].count
    tiles = [(v0, min(P, rows - v0)) for v0 in range(0, rows, P)]
    per_load = max(1, min(count, BROADCAST_MAX // block))
    if len(tiles) * count > MAX_STEPS or block > ROW_MAX:
        raise Declined("too many steps")
    for v0, vp in tiles:
        acc = _tile((vp, block), x.dtype)
        nisa.dma_copy(dst=acc, src=x.ap([[x_r, vp], [x_b, block]], offset=x.offset + v0 * x_r))
        names = _tile((vp, count))  # row(n) on every partition
        for j, (w, m) in enumerate(zip(words, mults, strict=True)):
            ids = w.row(0, count, vp)
            if j == 0:
                nisa.tensor_scalar(names, ids, A.multiply, float(m))
            else:
                nisa.scalar_tensor_tensor(names, ids, A.multiply, float(m), A.add, names)
        mine = _tile((vp, block))  # the row number of each partition
        nisa.iota(mine, [[0, block]], offset=v0, channel_multiplier=1)
        for n0 in range(0, count, per_load):
            m = min(per_load, count - n0)
            rows_n = _tile((vp, m * block), values.dtype)
            nisa.dma_copy(dst=rows_n, src=values.ap([[0, vp], [v_n, m], [v_b, block]],
                                                     offset=values.offset + n0 * v_n))
            for j in range(m):
                hit = _tile((vp, block), nl.uint8)
                nisa.tensor_scalar(hit, mine, A.equal, names[:, n0 + j:n0 + j + 1])
                total = _tile((vp, block), x.dtype)  # rounded to x's dtype, as each CPU addition is
                nisa.tensor_tensor(total, acc, rows_n[:, j * block:(j + 1) * block], A.add)
                nisa.tensor_copy_predicated(acc, total, hit)
        nisa.dma_copy(dst=out.ap([[o_r, vp], [o_b, block]], offset=out.offset + v0 * o_r), src=acc)


def _one(dims) -> tuple[int, int] | None:
    """(size, step) of (step, size) dims that walk memory as one; None otherwise."""
    sizes, (steps,) = coalesce([tuple(dims)])
    if len(sizes) > 1:
        return None
    return (sizes[0], steps[0]) if sizes else (1, 1)


def plan_index_put_accumulate(call: Call) -> Launch | None:
    """``index_put_`` with ``accumulate=True`` (``index_dma.plan_index_put`` hands it here): index
    tensors of one shape on the leading dims of ``self`` (an embedding's backward ``x[ids] += g``,
    a pooled ``x[arange, pos] += g``, MoE outputs added back to their tokens)."""
    x, indices, values = call.arg(0, "self"), call.arg(1, "indices"), call.arg(2, "values")
    if not isinstance(indices, list | tuple) or not indices or call.inputs[0] is not x:
        return None
    k = len(indices)
    if any(not isinstance(t, torch.Tensor) or t.is_cpu or t.dtype is not torch.int64 for t in indices):
        return None
    shape = tuple(indices[0].shape)
    if any(tuple(t.shape) != shape for t in indices) or not shape or x.dim() < k:
        return None
    if (not isinstance(values, torch.Tensor) or values.is_cpu or values.dtype != x.dtype
            or x.dtype not in FLOAT_DTYPES or tuple(values.shape) != shape + tuple(x.shape[k:])):
        return None
    out = call.outputs[0]
    lead = [_one((t.stride(d), t.shape[d]) for d in range(k)) for t in (x, out)]
    trail = [_one((t.stride(d), t.shape[d]) for d in range(j, t.dim())) for t, j in
             ((x, k), (out, k), (values, len(shape)))]
    v_lead = _one((values.stride(d), values.shape[d]) for d in range(len(shape)))
    if None in lead or None in trail or v_lead is None:
        return None
    rows, block = math.prod(x.shape[:k]), math.prod(x.shape[k:])
    steps = ((lead[0][1], trail[0][1]), (lead[1][1], trail[1][1]), (v_lead[1], trail[2][1]))
    mults = [math.prod(x.shape[j + 1:k]) for j in range(k)]
    positions = [next(i for i, t in enumerate(call.inputs) if t is ix) for ix in indices]
    pos_v = next(i for i, t in enumerate(call.inputs) if t is values)
    sizes = [x.shape[j] for j in range(k)]

    def admit(inputs):
        return all(indices_within(inputs[p], n) for p, n in zip(positions, sizes, strict=True))

    return Launch(index_add_kernel, (OUT(0), IN(0), IN(pos_v), *(IN(p) for p in positions)),
                  {"rows": rows, "block": block, "steps": steps, "mults": mults}, admit=admit,
                  flops=float(values.numel()) * min(P, rows))


# ---------------------------------------------------------------- histc


def histc_kernel(out, x, *, n, step, bins, lo, hi, words):
    """Counts of ``x``'s ``n`` elements (``step`` apart) in ``bins`` bins over ``[lo, hi]``."""
    width = float(np.float32(hi) - np.float32(lo))  # ATen's fp32 max - min
    chunks = [(c0, min(HIST_CHUNK, n - c0)) for c0 in range(0, n, HIST_CHUNK)]
    groups = [(b0, min(P, bins - b0)) for b0 in range(0, bins, P)]
    if len(chunks) * len(groups) > MAX_STEPS:
        raise Declined("too many steps")
    for b0, bp in groups:
        lower = _tile((bp, 1))
        nisa.iota(lower, [[0, 1]], offset=b0, channel_multiplier=1)
        last = _tile((bp, 1))  # the top edge (q == bins) counts in the last bin: no upper bound
        nisa.tensor_scalar(last, lower, A.equal, float(bins - 1), op1=A.multiply, operand1=2.0**30)
        upper = _tile((bp, 1))
        nisa.scalar_tensor_tensor(upper, lower, A.add, 1.0, A.add, last)
        counts = _tile((bp, 1))
        nisa.memset(counts, 0.0)
        for c0, f in chunks:
            xs = _tile((bp, f), x.dtype)
            nisa.dma_copy(dst=xs, src=x.ap([[0, bp], [step, f]], offset=x.offset + c0 * step))
            q = _tile((bp, f))
            nisa.tensor_scalar(q, xs, A.subtract, float(lo), op1=A.multiply, operand1=float(bins))
            nisa.tensor_scalar(q, q, A.divide, width)
            inside = _tile((bp, f))  # lo <= x <= hi (NaN: neither)
            nisa.tensor_scalar(inside, xs, A.greater_equal, float(lo))
            nisa.scalar_tensor_tensor(inside, xs, A.less_equal, float(hi), A.multiply, inside)
            mine = _tile((bp, f))
            nisa.tensor_scalar(mine, q, A.greater_equal, lower)
            nisa.scalar_tensor_tensor(mine, q, A.less, upper, A.multiply, mine)
            part = _tile((bp, 1))
            both = _tile((bp, f))
            nisa.tensor_tensor(both, mine, inside, A.multiply)
            nisa.tensor_reduce(part, A.add, both, axis=1)
            nisa.tensor_tensor(counts, counts, part, A.add)
        res = _tile((bp, words), out.dtype)
        if words == 2:
            nisa.memset(res, 0)
            nisa.tensor_copy(res[:, 0:1], counts)
        else:
            nisa.tensor_copy(res, counts)
        nisa.dma_copy(dst=out.ap([[out.dims[0][0], bp], [1, words]], offset=out.offset + b0 * out.dims[0][0]),
                      src=res)


@native("aten::histc.default")
def plan_histc(call: Call) -> Launch | None:
    x = call.inputs[0]
    out = call.outputs[0]
    bins, lo, hi = call.arg(1, "bins", 100), call.arg(2, "min", 0), call.arg(3, "max", 0)
    integer = not x.dtype.is_floating_point
    if x.dtype is not torch.float32 and x.dtype not in (torch.int32, torch.int64):
        return None  # (bf16/fp16: ATen-CPU rounds every step to the 16-bit type)
    if integer:
        lo, hi = int(lo), int(hi)  # CUDA truncates them
        if out.dtype != x.dtype or (hi - lo) * bins >= EXACT or max(abs(lo), abs(hi)) >= EXACT:
            return None
    else:
        lo, hi = float(torch.tensor(lo, dtype=torch.float32)), float(torch.tensor(hi, dtype=torch.float32))
    if not lo < hi or bins <= 0 or x.numel() == 0:
        return None  # (min == max: the data's own range, decided on the host)
    sizes, (steps,) = coalesce([tuple((x.stride(d), x.shape[d]) for d in range(x.dim()))])
    if len(sizes) > 1:
        return None
    wide = x.dtype is torch.int64
    n, step = (sizes[0], steps[0]) if sizes else (1, 0)
    words = 2 if wide else 1
    if numpy_dtype(torch.int32 if wide else x.dtype) is None:
        return None
    return Launch(histc_kernel, (OUT(0), IN(0)),
                  {"n": n, "step": step * words, "bins": bins, "lo": lo, "hi": hi, "words": words},
                  int64_in_32_bits=wide, flops=float(x.numel()) * 8)
