"""Advanced indexing by the indirect DMA: ``x[..., i, j, ...]`` (``index.Tensor``),
``x[..., i, j, ...] = v`` (``index_put_`` without accumulation, ``_index_put_impl_``) and the
``gather`` rows ``indexing.py``'s select-sum does not take (integer dtypes, long rows, many columns).
``index_put_(accumulate=True)`` is ``scatter.py``'s (serial additions, in ATen-CPU's order).

The index tensors address consecutive dims ``d .. d+k`` of ``x`` (``None`` before them, as
``x[:, idx]`` gives): element ``n`` of the indices names the block ``x[o, i[n], j[n], ...]``
(``o`` each combination of the leading dims, the block the dims after the indexed ones). Per
128 indices, VectorE forms each block's element offset ``sum i[n] * stride`` from the indices'
low int32 words (DMA'd as fp32: exact below 2**24, a per-call check with the index bounds), and
one DMA_COPY_INDIRECT (``.ap(vector_offset=...)``, descriptors from the software DGE) moves the
blocks — gathered into the output, or scattered from ``v`` (a 0-dim ``v`` broadcast by stride-0
DMA). A DMA copies bytes, so every dtype is exact (int64 as its word pairs). A scatter of
several values naming one block twice (undefined in ATen) runs on the host.

What runs on the host: negative or out-of-range indices (ATen wraps or raises), boolean masks,
index tensors of different ranks (same-rank shapes broadcast in a gather), indices not on
consecutive dims, and
layouts whose blocks or index dims do not walk memory in one pattern.
"""

from __future__ import annotations

import itertools
import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import numpy_dtype
from neuronsim.kernels.indexing import INDEX_DTYPES, IndexWords, _one_walk, indices_within, plan_gather_rows
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.scatter import plan_index_put_accumulate
from neuronsim.kernels.tiling import PARTITIONS, coalesce
from neuronsim.sim.ir import AluOp

A = AluOp
P = PARTITIONS
F32 = nl.float32
EXACT = 2**24  # element offsets are formed in fp32
BLOCK_MAX = 8192  # elements of one block moved per DMA (larger blocks are cut)
MAX_DMAS = 2048


def _layout(x, out_like, d: int, k: int, m: int):
    """(outer sizes, outer steps [x, other], block size, block steps [x, other]) for indexing dims
    ``d .. d+k`` of ``x`` against ``out_like`` whose index part is ``m`` dims at ``d``."""
    outer, outer_steps = coalesce([x.dims[:d], out_like.dims[:d]])
    block, block_steps = _one_walk([x.dims[d + k:], out_like.dims[d + m:]],
                                   "the blocks after the indexed dims")
    return outer, outer_steps, block, block_steps


def _offsets(words, strides, n0: int, p: int):
    """``[p, 1]`` int32 element offsets ``sum_j idx_j[n] * strides[j]`` of indices ``n0 .. n0+p``."""
    acc = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
    for j, (w, s) in enumerate(zip(words, strides, strict=True)):
        col = w.column(n0, p)
        if j == 0:
            nisa.tensor_scalar(dst=acc, data=col, op0=A.multiply, operand0=float(s))
        else:
            nisa.scalar_tensor_tensor(dst=acc, data=col, op0=A.multiply, operand0=float(s), op1=A.add,
                                      operand1=acc)
    offs = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=offs, src=acc)
    return offs


def _indexed(view, base: int, offs, p: int, step: int, n: int):
    """``p`` partitions of ``n`` elements (``step`` apart), partition ``q`` from ``base + offs[q]``."""
    unit = view.ap([[1, 1], [1, 1]], offset=0)  # a base whose indexed dim has stride 1
    return unit.ap([[1, p], [step, n]], offset=base, vector_offset=offs, indirect_dim=0)


def _chunks(n: int, size: int):
    return [(i, min(size, n - i)) for i in range(0, n, size)]


def _pieces(words, strides, outer, steps_xy, block):
    """Each DMA of an indexed copy: (x base, other base, first index, index count, [p, 1] offsets,
    block start, block length), over the outer dims, 128 indices at a time and blocks cut to
    BLOCK_MAX. ``steps_xy``: the outer dims' steps in x and in the other tensor."""
    n_idx = words[0].count
    steps = math.prod(outer) * len(_chunks(n_idx, P)) * len(_chunks(block, BLOCK_MAX))
    if steps > MAX_DMAS:
        raise Declined(f"{steps} DMAs")
    for idx in itertools.product(*(range(n) for n in outer)):
        xb, ob = (sum(i * s for i, s in zip(idx, st, strict=True)) for st in steps_xy)
        for n0, p in _chunks(n_idx, P):
            offs = _offsets(words, strides, n0, p)
            for c0, c in _chunks(block, BLOCK_MAX):
                yield xb, ob, n0, p, offs, c0, c


def gather_kernel(out, x, *indices, d, wide, shape=None):
    """``out[o, n, b] = x[o, idx_0[n], ..., b]`` (``shape``: the index tensors broadcast to it)."""
    if shape is not None:  # stride-0 dims: IndexWords walks them run by run
        indices = [ix.broadcast_to((*shape, 2) if w else shape)
                   for ix, w in zip(indices, wide[1:], strict=True)]
    k, m = len(indices), len(indices[0].shape) - (1 if wide[1] else 0)
    words = [IndexWords(ix, w) for ix, w in zip(indices, wide[1:], strict=True)]
    outer, (x_outer, o_outer), block, (x_bstep, o_bstep) = _layout(x, out, d, k, m)
    _, (o_nstep,) = _one_walk([out.dims[d:d + m]], "the output's index dims")
    strides = [x.dims[d + j][0] for j in range(k)]
    for xb, ob, n0, p, offs, c0, c in _pieces(words, strides, outer, (x_outer, o_outer), block):
        xb, ob = x.offset + xb, out.offset + ob
        dst = out.ap([[o_nstep, p], [o_bstep, c]], offset=ob + n0 * o_nstep + c0 * o_bstep)
        nisa.dma_copy(dst=dst, src=_indexed(x, xb + c0 * x_bstep, offs, p, x_bstep, c))


def put_kernel(x, values, *indices, d, wide, broadcast):
    """``x[o, idx_0[n], ..., b] = values[o, n, b]`` (``broadcast``: one 0-dim value everywhere)."""
    k, m = len(indices), len(indices[0].shape) - (1 if wide[1] else 0)
    words = [IndexWords(ix, w) for ix, w in zip(indices, wide[1:], strict=True)]
    if broadcast:  # a 0-dim value: only x's layout matters
        outer, x_outer = coalesce([x.dims[:d]])[0], coalesce([x.dims[:d]])[1][0]
        block, (x_bstep,) = _one_walk([x.dims[d + k:]], "the blocks after the indexed dims")
        v_outer, v_nstep, v_bstep = [0] * len(outer), 0, 0
    else:
        outer, (x_outer, v_outer), block, (x_bstep, v_bstep) = _layout(x, values, d, k, m)
        _, (v_nstep,) = _one_walk([values.dims[d:d + m]], "the values' index dims")
    strides = [x.dims[d + j][0] for j in range(k)]
    for xb, vb, n0, p, offs, c0, c in _pieces(words, strides, outer, (x_outer, v_outer), block):
        xb, vb = x.offset + xb, values.offset + vb
        t = nl.ndarray((p, c), dtype=x.dtype, buffer=nl.sbuf)
        src = values.ap([[v_nstep, p], [v_bstep, c]], offset=vb + n0 * v_nstep + c0 * v_bstep)
        nisa.dma_copy(dst=t, src=src)
        nisa.dma_copy(dst=_indexed(x, xb + c0 * x_bstep, offs, p, x_bstep, c), src=t)


# ---------------------------------------------------------------- planners


def _index_dims(x, indices, broadcast: bool = False) -> tuple[int, list] | None:
    """(first indexed dim, the index tensors) when they are consecutive device int tensors of one
    shape (``broadcast``: of shapes that broadcast, with as many dims); None otherwise."""
    if not isinstance(indices, list | tuple) or not indices:
        return None
    present = [i for i, t in enumerate(indices) if t is not None]
    if not present or present != list(range(present[0], present[-1] + 1)):
        return None
    tensors = [indices[i] for i in present]
    if any(not isinstance(t, torch.Tensor) or t.is_cpu or t.dtype not in INDEX_DTYPES for t in tensors):
        return None
    if tensors[0].dim() == 0 or len({tuple(t.shape) for t in tensors}) != 1 and not (
            broadcast and len({t.dim() for t in tensors}) == 1 and _broadcasts(tensors)):
        return None
    return present[0], tensors


def _broadcasts(tensors) -> bool:
    try:
        torch.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError:
        return False
    return True


def _position(call: Call, t) -> int:
    return next(i for i, u in enumerate(call.inputs) if u is t)


@native("aten::index.Tensor")
def plan_index(call: Call) -> Launch | None:
    x = call.arg(0, "self")
    found = _index_dims(x, call.arg(1, "indices"), broadcast=True)
    if found is None or call.inputs[0] is not x:
        return None
    d, tensors = found
    out = call.outputs[0]
    if out.dtype != x.dtype:
        return None
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    positions = [_position(call, t) for t in tensors]
    sizes = [x.shape[d + j] for j in range(len(tensors))]
    wide = (x.dtype is torch.int64, *(t.dtype is torch.int64 for t in tensors))
    admit = _admit_at(positions, sizes, x.numel() * (2 if wide[0] else 1))
    statics = {"d": d, "wide": wide}
    if any(tuple(t.shape) != shape for t in tensors):
        statics["shape"] = shape  # (Bloom's and Qwen2-MoE's masks: x[rows[:, None], cols[None, :]])
    return Launch(gather_kernel, (OUT(0), IN(0), *(IN(p) for p in positions)), statics, admit=admit)


def _admit_at(positions: list[int], sizes: list[int], span: int, distinct: bool = False):
    """Every index within its dim (the host wraps negative ones, or raises), offsets exact in fp32,
    and (``distinct``: a scatter of several values) no block named twice, which ATen leaves
    undefined."""
    def admit(inputs) -> bool:
        if span >= EXACT:
            return False
        if not all(indices_within(inputs[p], n) for p, n in zip(positions, sizes, strict=True)):
            return False
        if not distinct:
            return True
        flat = torch.zeros_like(inputs[positions[0]], dtype=torch.int64)
        for p, n in zip(positions, sizes, strict=True):
            flat = flat * n + inputs[p]
        return flat.unique().numel() == flat.numel()
    return admit


@native("aten::_index_put_impl_.default", "aten::index_put_.default")
def plan_index_put(call: Call) -> Launch | None:
    x, values = call.arg(0, "self"), call.arg(2, "values")
    if call.arg(3, "accumulate", False):
        return plan_index_put_accumulate(call)
    if call.inputs[0] is not x:
        return None
    found = _index_dims(x, call.arg(1, "indices"))
    if found is None or not isinstance(values, torch.Tensor) or values.is_cpu or values.dtype != x.dtype:
        return None
    d, tensors = found
    k = len(tensors)
    indexed_shape = (*x.shape[:d], *tensors[0].shape, *x.shape[d + k:])
    broadcast = values.dim() == 0
    if not broadcast and tuple(values.shape) != indexed_shape:
        return None  # (values broadcast along some dims: the host)
    if broadcast and x.dtype is torch.int64:
        return None  # (one int64 value repeated: its two words alternate, not one stride-0 walk)
    positions = [_position(call, t) for t in tensors]
    sizes = [x.shape[d + j] for j in range(k)]
    wide = (x.dtype is torch.int64, *(t.dtype is torch.int64 for t in tensors))
    admit = _admit_at(positions, sizes, x.numel() * (2 if wide[0] else 1), distinct=not broadcast)
    vpos = _position(call, values)
    return Launch(put_kernel, (OUT(0), IN(vpos), *(IN(p) for p in positions)),
                  {"d": d, "wide": wide, "broadcast": broadcast}, admit=admit)


# ---------------------------------------------------------------- gather


def gather_dma_kernel(out, x, index, *, dim, words):
    """``out[r, k] = x[r, index[r, k]]`` along ``dim`` (``r``: every index but ``dim``): per row, 128
    positions at a time, VectorE forms the element offsets ``index * stride`` and one indirect DMA
    moves the elements (``words`` int32 words each for int64: the bytes, so every dtype is exact)."""
    nd = len(out.shape) - (1 if words == 2 else 0)
    rows = [d for d in range(nd) if d != dim]
    x_step, o_step, i_step = x.dims[dim][0], out.dims[dim][0], index.dims[dim][0]
    chunks = _chunks(out.shape[dim], P)
    sizes = [out.shape[d] for d in rows]
    if math.prod(sizes) * len(chunks) * 2 > MAX_DMAS:
        raise Declined("too many DMAs")
    for idx in itertools.product(*(range(n) for n in sizes)):
        xb, ob, ib = (v.offset + sum(i * v.dims[d][0] for i, d in zip(idx, rows, strict=True))
                      for v in (x, out, index))
        for k0, p in chunks:
            ids = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
            nisa.dma_copy(dst=ids, src=index.ap([[i_step, p], [1, 1]], offset=ib + k0 * i_step))
            acc = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=acc, data=ids, op0=A.multiply, operand0=float(x_step))
            offs = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=offs, src=acc)
            t = nl.ndarray((p, words), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=_indexed(x, xb, offs, p, 1, words))
            nisa.dma_copy(dst=out.ap([[o_step, p], [1, words]], offset=ob + k0 * o_step), src=t)


@native("aten::gather.default")
def plan_gather(call: Call) -> Launch | None:
    rows = plan_gather_rows(call)
    if rows is not None or len(call.inputs) != 2 or call.kwargs.get("sparse_grad") or (
            len(call.args) > 3 and call.args[3]):
        return rows
    x, index = call.inputs
    out = call.outputs[0]
    wide = x.dtype is torch.int64
    if x.dim() == 0 or index.dim() != x.dim() or index.dtype is not torch.int64 or out.dtype != x.dtype or (
            not wide and numpy_dtype(x.dtype) is None):
        return None
    dim = call.arg(1, "dim") % x.dim()
    n, span = x.shape[dim], (x.numel() * (2 if wide else 1))

    def admit(inputs):
        return span < EXACT and indices_within(inputs[1], n)

    return Launch(gather_dma_kernel, (OUT(0), IN(0), IN(1)), {"dim": dim, "words": 2 if wide else 1},
                  admit=admit)
