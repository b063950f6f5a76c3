"""Reductions with int64 index results: ``max.dim`` / ``min.dim`` (values and indices), ``argmax``
and ``argmin`` (one dim, or the flattened tensor).

VectorE's top-8 instructions do the work: ``max8`` gives the 8 largest values of each partition's
free elements (NaN ranking above every number, ties in input order) and ``nc_find_index8`` the
index of the first element equal to each (NaN matching NaN, -0.0 matching 0.0). Their first column
is ATen's answer bit for bit: the maximum, or the first NaN, and the first index holding it. A
minimum is the maximum of the negated elements (negation is exact; ScalarE does it, so VectorE
keeps to the top-8 instructions), negated back.

- ``rows``: kept elements on the partitions (128 per tile; the kept dims coalesced, sorted by
  stride), the reduced dim along the free axis (a strided DMA walks an outer reduced dim). Rows
  longer than ``CHUNK`` are cut into chunks; each chunk's maximum and global index go into a
  column, and the chunk maxima get the same max8/find_index8 treatment: the first chunk holding the
  maximum, whose index an iota compare and a select-sum pick. A row shorter than 8 is padded with
  ``-inf`` (never chosen before a real element: the first occurrence wins).
- ``spread``: few kept elements and long reductions (``argmax`` of a flattened tensor, a batch of
  a few rows over a vocabulary): each kept element's reduced elements are cut into up to 128
  segments, one per partition (the segments of several kept elements share one load), found as in
  rows; a TensorE transpose (it moves bits) lays each kept element's segment maxima and indices
  along its own partition, combined as chunks are. Both layouts are VectorE-bound; the planner
  picks the one with fewer elements per partition to read (``SPREAD_OVERHEAD``).

No 64-bit dtype exists on the chip: an int64 output is its (low, high) int32 words (``bridge.py``).
Indices are collected in an SBUF ``[p, 2 * groups]`` int32 tile whose high words are zero, and
stored with one DMA per walk of the kept dims, as the values are. Indices are computed in fp32
(exact below 2**24; longer reductions fall back).

Covered: float32 / bfloat16 / float16, and int8 / uint8 / int16 (exact in fp32), any one dim,
negative dims, keepdim, non-contiguous inputs; the flattened tensor when its dims coalesce into
one walk in logical order; int32 whose values are below 2**24 in magnitude (a per-call check:
VectorE compares in fp32). Not covered (fall back): int64/bool inputs. ``topk`` is
``sorting.py``'s.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.reduction import coalesced, kept_walk, store_columns
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import PARTITIONS, coalesce
from neuronsim.sim.engines.vector_top_k import TOP_K  # max8 / nc_find_index8 results per partition
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
P = PARTITIONS
CHUNK = 8192  # reduced elements per partition per load: 32 KiB of fp32 (max8 reads up to 16,384)
MAX_STEPS = 1024  # loads per kernel; past this (tiny awkward dims) the op falls back
MAX_INDEX = 2**24  # fp32 holds every index below this exactly
# Both layouts are VectorE-bound (max8 + find_index8 read every element): rows take n elements
# per partition for every 128 kept elements, spread n / 128 per kept element plus this many for
# its instructions' fixed costs (measured on the simulator), so spread wins for few kept elements.
SPREAD_OVERHEAD = 16
DTYPES = (*FLOAT_DTYPES, torch.int8, torch.uint8, torch.int16, torch.int32)


@dataclass(frozen=True)
class Layout:
    kept: tuple[tuple[int, int, int], ...]  # (size, input step, output step), outermost first
    n: int  # reduced elements per kept element
    step: int  # their input step
    scheme: str  # "rows" | "spread"
    negate: bool  # min / argmin: the maximum of -x
    values: bool  # max.dim / min.dim: a values output too


def plan_layout(x, out, dim: int | None, keepdim: bool, negate: bool, values: bool) -> Layout | None:
    """The layout of a reduction over ``dim`` (None: the flattened tensor); None if not covered."""
    if dim is None:
        sizes, (steps,) = coalesce([tuple((x.stride(d), x.shape[d]) for d in range(x.dim()))])
        if len(sizes) > 1:  # the flat index is in logical order, which these dims do not walk as one
            return None
        n, step = (sizes[0], steps[0]) if sizes else (1, 0)
        kept = ()
    else:
        dim = dim % max(x.dim(), 1)
        n, step = (x.shape[dim], x.stride(dim)) if x.dim() else (1, 0)
        o_strides = list(out.stride())
        kept_x, kept_o, j = [], [], 0
        for d in range(x.dim()):
            if d == dim:
                j += keepdim
                continue
            kept_x.append((x.stride(d), x.shape[d]))
            kept_o.append((o_strides[j], x.shape[d]))
            j += 1
        ks, (kxs, kos) = coalesced([kept_x, kept_o])
        kept = tuple(zip(ks, kxs, kos, strict=True))
    if n >= MAX_INDEX:
        return None
    n_keep = math.prod(s for s, _, _ in kept)
    spread = n_keep * (-(-n // P) + SPREAD_OVERHEAD) < -(-n_keep // P) * n
    scheme = "spread" if spread and n >= P * TOP_K else "rows"
    return Layout(kept, n, step, scheme, negate, values)


# ---------------------------------------------------------------- engine steps


def _tile(shape, dtype=F32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


class _Iota:
    """``[128, n]`` fp32 tiles of 0..n-1 along the free axis (GpSimd), made once per width."""

    def __init__(self):
        self.made = {}

    def __call__(self, n):
        if n not in self.made:
            t = _tile((P, n))
            nisa.iota(t, [[1, n]])
            self.made[n] = t
        return self.made[n]


def _top(src, p, n, negate):
    """The maximum ``[p, 1]`` fp32 and its first index ``[p, 1]`` uint32 of ``src [p, n]`` (SBUF,
    any dtype): negated first for a minimum, padded with -inf to max8's 8 elements."""
    if negate or n < TOP_K:
        work = _tile((p, max(n, TOP_K)))
        if n < TOP_K:
            nisa.memset(work[:, n:], -math.inf)
        if negate:  # on ScalarE: VectorE's queue holds only the top-8 instructions
            nisa.tensor_scalar(work[:, :n], src, A.multiply, -1.0, engine=nisa.engine.scalar)
        else:
            nisa.tensor_copy(work[:, :n], src, engine=nisa.engine.scalar)
        src = work
    m8 = _tile((p, TOP_K))
    nisa.max8(m8, src)
    i8 = _tile((p, TOP_K), nl.uint32)
    nisa.nc_find_index8(i8, src, m8)
    return m8[:, 0:1], i8[:, 0:1]


def _first_of(cand, gidx, p, n, iota):
    """Combine ``n`` candidates per partition (maxima ``cand [p, max(n, 8)]`` fp32, -inf padded;
    their global indices ``gidx [p, n]`` fp32): the maximum and the index of the first holding it."""
    m, j = _top(cand, p, max(n, TOP_K), False)
    jf = _tile((p, 1))
    nisa.tensor_copy(jf, j)
    picked = _tile((p, n))  # (column == j) * gidx: only the chosen column is non-zero
    nisa.scalar_tensor_tensor(picked, iota(n)[:p], A.equal, jf, A.multiply, gidx)
    idx = _tile((p, 1))
    nisa.tensor_reduce(idx, A.add, picked, axis=1)
    return m, idx


def _row_max(x, base, pp, p_step, lay: Layout, iota):
    """Maximum and first index (global along the row) of rows ``base + i*p_step``, ``i < pp``."""
    chunks = [(c0, min(CHUNK, lay.n - c0)) for c0 in range(0, lay.n, CHUNK)]
    if len(chunks) == 1:
        t = _tile((pp, lay.n), x.dtype)
        nisa.dma_copy(dst=t, src=x.ap([[p_step, pp], [lay.step, lay.n]], offset=base))
        return _top(t, pp, lay.n, lay.negate)
    cand = _tile((pp, max(len(chunks), TOP_K)))
    if len(chunks) < TOP_K:
        nisa.memset(cand[:, len(chunks):], -math.inf)
    gidx = _tile((pp, len(chunks)))
    for c in nl.affine_range(len(chunks)):
        c0, f = chunks[c]
        t = _tile((pp, f), x.dtype)
        nisa.dma_copy(dst=t, src=x.ap([[p_step, pp], [lay.step, f]], offset=base + c0 * lay.step))
        m, i = _top(t, pp, f, lay.negate)
        nisa.tensor_copy(cand[:, c:c + 1], m)
        nisa.tensor_scalar(gidx[:, c:c + 1], i, A.add, float(c0))
    return _first_of(cand, gidx, pp, len(chunks), iota)


def _segment_maxima(x, base, k, k_step, pp, seg, lay: Layout, iota):
    """Per partition ``s`` and kept element ``j``: the maximum ``[pp, k]`` of elements ``s*seg ..
    (s+1)*seg`` of row ``j`` and its index in the segment. Short segments of several kept elements
    share a load (one DMA and one negation for up to CHUNK elements per partition)."""
    if seg > CHUNK:  # long segments: chunked one row at a time
        cand, found = _tile((pp, k)), _tile((pp, k))
        part = dataclasses.replace(lay, n=seg)
        for j in nl.affine_range(k):
            m, i = _row_max(x, base + j * k_step, pp, seg * lay.step, part, iota)
            nisa.tensor_copy(cand[:, j:j + 1], m)
            nisa.tensor_copy(found[:, j:j + 1], i)
        return cand, found
    m8, i8 = _tile((pp, TOP_K * k)), _tile((pp, TOP_K * k), nl.uint32)
    per_load = min(k, CHUNK // seg)
    for b in nl.affine_range(-(-k // per_load)):
        j0 = b * per_load
        kb = min(per_load, k - j0)
        t = _tile((pp, kb * seg), x.dtype)
        nisa.dma_copy(dst=t, src=x.ap([[seg * lay.step, pp], [k_step, kb], [lay.step, seg]],
                                      offset=base + j0 * k_step))
        if lay.negate:
            work = _tile((pp, kb * seg))
            nisa.tensor_scalar(work, t, A.multiply, -1.0, engine=nisa.engine.scalar)
            t = work
        for j in range(kb):
            at = slice(TOP_K * (j0 + j), TOP_K * (j0 + j + 1))
            nisa.max8(m8[:, at], t[:, j * seg:(j + 1) * seg])
            nisa.nc_find_index8(i8[:, at], t[:, j * seg:(j + 1) * seg], m8[:, at])
    return m8[:, ::TOP_K], i8[:, ::TOP_K]


def _spread_max(x, base, k, k_step, lay: Layout, iota):
    """``k`` kept elements' reductions: each row cut into up to 128 segments, one per partition
    (a column per kept element), then a transpose puts each row's segments along its partition's
    free axis, combined as chunks are. A short last segment is reduced with the kept elements on
    the partitions and joins after the transpose."""
    seg = -(-lay.n // P)
    pp, tail = divmod(lay.n, seg)
    cand, found = _segment_maxima(x, base, k, k_step, pp, seg, lay, iota)
    starts = _tile((pp, 1))  # segment s's indices start at s * seg: iota's partition multiplier
    nisa.iota(starts, [[0, 1]], channel_multiplier=seg)
    gidx = _tile((pp, k))
    nisa.tensor_scalar(gidx, found, A.add, starts)
    row_c = nl.ndarray((k, pp), dtype=F32, buffer=nl.psum)
    row_i = nl.ndarray((k, pp), dtype=F32, buffer=nl.psum)
    nisa.nc_transpose(row_c, cand)  # moves bits: NaN and -0.0 survive
    nisa.nc_transpose(row_i, gidx)
    w = pp + (tail > 0)
    c, g = _tile((k, max(w, TOP_K))), _tile((k, w))
    if w < TOP_K:
        nisa.memset(c[:, w:], -math.inf)
    nisa.tensor_copy(c[:, :pp], row_c)
    nisa.tensor_copy(g[:, :pp], row_i)
    if tail:
        mt, it = _row_max(x, base + pp * seg * lay.step, k, k_step, dataclasses.replace(lay, n=tail), iota)
        nisa.tensor_copy(c[:, pp:w], mt)
        nisa.tensor_scalar(g[:, pp:w], it, A.add, float(pp * seg))
    return _first_of(c, g, k, w, iota)


# ---------------------------------------------------------------- the kernel


def _store_indices(out, offset, step, t, n):
    """Write ``n`` int64 results (low words at ``t[c, 2j]``, element ``j*128 + c``) ``step`` apart."""
    full, tail = divmod(n, P)
    base = out.offset + 2 * offset
    if full:
        nisa.dma_copy(dst=out.ap([[2 * step, P], [2 * P * step, full], [1, 2]], offset=base),
                      src=t[:, :2 * full])
    if tail:
        nisa.dma_copy(dst=out.ap([[2 * step, tail], [1, 2]], offset=base + 2 * full * P * step),
                      src=t[:tail, 2 * full:2 * full + 2])


def arg_reduce(*views, layout: Layout):
    *outs, x = views
    vals, idx_out = (outs[0], outs[1]) if layout.values else (None, outs[0])
    iota = _Iota()
    walks = list(kept_walk(layout.kept))
    spread = layout.scheme == "spread"
    n_keep = math.prod(n for n, _, _ in layout.kept)
    loads = (n_keep if spread else -(-n_keep // P)) * -(-layout.n // (P * CHUNK if spread else CHUNK))
    if loads > MAX_STEPS:
        raise Declined(f"{loads} loads")
    for xo, oo, (n, xs, os_) in walks:
        groups = -(-n // P)
        idx = _tile((min(P, n), 2 * groups), nl.int32)
        nisa.memset(idx, 0)  # the high words (indices are non-negative)
        res = _tile((min(P, n), groups), vals.dtype) if vals is not None else None
        for g in nl.affine_range(groups):
            pp = min(P, n - g * P)
            base = x.offset + xo + g * P * xs
            if spread:
                m, i = _spread_max(x, base, pp, xs, layout, iota)
            else:
                m, i = _row_max(x, base, pp, xs, layout, iota)
            nisa.tensor_copy(idx[:pp, 2 * g:2 * g + 1], i)
            if res is not None:
                if layout.negate:
                    nisa.tensor_scalar(res[:pp, g:g + 1], m, A.multiply, -1.0)
                else:
                    nisa.tensor_copy(res[:pp, g:g + 1], m)
        _store_indices(idx_out, oo, os_, idx, n)
        if res is not None:
            store_columns(vals, oo, os_, res, n)


# ---------------------------------------------------------------- planners


def _launch(call: Call, dim, keepdim, negate: bool) -> Launch | None:
    x = call.inputs[0]
    values = len(call.outputs) == 2
    if x.dtype not in DTYPES or call.outputs[-1].dtype is not torch.int64:
        return None
    if values and (call.outputs[0].dtype != x.dtype or call.outputs[0].stride() != call.outputs[1].stride()):
        return None
    layout = plan_layout(x, call.outputs[-1], dim, bool(keepdim), negate, values)
    if layout is None:
        return None
    operands = (*(OUT(i) for i in range(len(call.outputs))), IN(0))
    admit = None
    if x.dtype is torch.int32:  # (CLIP's argmax of int32 token ids) fp32 compares are exact below 2**24
        def admit(inputs):
            return inputs[0].numel() == 0 or int(inputs[0].abs().max()) < MAX_INDEX
    return Launch(arg_reduce, operands, {"layout": layout}, flops=float(x.numel()), admit=admit)


@native("aten::max.dim", "aten::min.dim")
def plan_max_dim(call: Call) -> Launch | None:
    negate = call.op._schema.name == "aten::min"
    return _launch(call, call.arg(1, "dim"), call.arg(2, "keepdim", False), negate)


@native("aten::argmax.default", "aten::argmin.default")
def plan_argmax(call: Call) -> Launch | None:
    negate = call.op._schema.name == "aten::argmin"
    return _launch(call, call.arg(1, "dim"), call.arg(2, "keepdim", False), negate)
