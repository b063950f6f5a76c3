"""Sorting along a dim: ``topk`` (MoE routers, top-k sampling) and ``sort`` (grouping tokens by
expert, ``argsort``), values and int64 indices bit-exact against ATen-CPU.

- ``topk``: rows on the partitions (128 per tile, the kept dims walked as ``argreduce.py`` walks
  them), the row along the free axis, as VectorE's top-8 instructions want it. Per round, ``max8``
  gives the row's 8 largest values in order and ``nc_find_index8`` the index of each in the
  unmodified row; ``nc_match_replace8`` knocks those 8 out (-inf) before the next round. The
  smallest k are the largest of the negated row (negation is exact), negated back. Values come from
  the row's own elements (bf16/fp16 through fp32 and back, exact).
- ``sort``: a rank sort. Each element's final position is its stable rank: ``#{j: x_j < x_i} +
  #{j: x_j == x_i, j before i}`` (``>`` descending). Per row, the elements to rank lie on the
  partitions (128 at a time) and the whole row along the free axis of every partition (a stride-0
  DMA); four VectorE passes over ``[128, n]`` count the rank, and an indirect DMA
  (``.ap(vector_offset=...)``) writes each element's bytes and its index to the rank's place.
  NaN sorts above +inf as in ATen: the key is the value with NaN as +inf, and equal keys order by
  ``(is NaN, index)`` (``(not NaN, index)`` descending). Keys compare in fp32: integers are exact
  below 2**24 (a per-call check; int64 is its low word under the 64-bit policy).

Ties: ATen-CPU's ``sort(stable=False)`` is libstdc++'s ``std::sort`` — insertion sort (stable) up to
16 elements, introsort beyond, whose order among equal values depends on the data's history in a way
no data-parallel kernel reproduces; ``topk`` uses ``nth_element``/``partial_sort`` likewise. So a
call whose result would hold tied values in an order CPU does not define stably runs on the host
(``Launch.admit``), as does the smallest k of a row holding NaN: an unstable sort of a row longer
than 16 with equal values, or a ``topk`` whose k values tie with another element (0.0 and -0.0 are
equal; so are two NaNs). ``sort(stable=True)`` is always the stable order, which the rank gives.

Not covered (host): ``topk(sorted=False)`` (CPU leaves the order unspecified), rows longer than
``TOPK_ROW_MAX`` / ``SORT_ROW_MAX``, k over ``TOPK_MAX``, int32/int64 ``topk`` (max8 compares fp32).
"""

from __future__ import annotations

import itertools
import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.argreduce import plan_layout
from neuronsim.kernels.bridge import FLOAT_DTYPES, numpy_dtype
from neuronsim.kernels.reduction import kept_walk
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import PARTITIONS
from neuronsim.sim.engines.vector_top_k import TOP_K, TOP_K_FREE_MAX
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
P = PARTITIONS
TOPK_MAX = 64  # 8 rounds of max8
TOPK_ROW_MAX = TOP_K_FREE_MAX  # max8 reads at most this many elements per partition
SORT_ROW_MAX = 4096  # [128, n] fp32 work tiles: 16 KiB per partition each
MAX_STEPS = 1024  # row tiles of one Program
EXACT = 2**24  # keys, ranks and offsets are fp32
SMALL_INTS = (torch.int8, torch.uint8, torch.int16)
TOPK_DTYPES = (*FLOAT_DTYPES, *SMALL_INTS)
SORT_DTYPES = (*FLOAT_DTYPES, *SMALL_INTS, torch.int32, torch.int64)
STD_SORT_INSERTION = 16  # libstdc++'s std::sort: insertion sort (stable) up to this many elements


def _tile(shape, dtype=F32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


# ---------------------------------------------------------------- topk


def topk_kernel(values, indices, x, *, kept, n, step, dim_steps, k, largest):
    """``values``/``indices`` [.., k, ..] of the k largest (smallest) of each row of ``x``."""
    v_dstep, i_dstep = dim_steps
    rounds = -(-k // TOP_K)
    width = max(n, TOP_K)
    walks = list(kept_walk(kept))
    if sum(-(-m // P) for _, _, (m, _, _) in walks) > MAX_STEPS:
        raise Declined("too many row tiles")
    for xo, oo, (m, xs, os_) in walks:
        for g in nl.affine_range(-(-m // P)):
            pp = min(P, m - g * P)
            raw = _tile((pp, n), x.dtype)
            nisa.dma_copy(dst=raw, src=x.ap([[xs, pp], [step, n]], offset=x.offset + xo + g * P * xs))
            row = _tile((pp, width))
            if n < TOP_K:  # never chosen before a real element
                nisa.memset(row[:, n:], -math.inf)
            if largest:
                nisa.tensor_copy(row[:, :n], raw, engine=nisa.engine.scalar)
            else:
                nisa.tensor_scalar(row[:, :n], raw, A.multiply, -1.0, engine=nisa.engine.scalar)
            work = row
            if rounds > 1:
                work = _tile((pp, width))
                nisa.tensor_copy(work, row)
            vals = _tile((pp, rounds * TOP_K))
            found = _tile((pp, rounds * TOP_K), nl.uint32)
            for r in range(rounds):
                at = slice(r * TOP_K, (r + 1) * TOP_K)
                nisa.max8(vals[:, at], work)
                nisa.nc_find_index8(found[:, at], row, vals[:, at])
                if r + 1 < rounds:
                    nisa.nc_match_replace8(work, work, vals[:, at], -math.inf)
            out = _tile((pp, k), values.dtype)
            if largest:
                nisa.tensor_copy(out, vals[:, :k])
            else:
                nisa.tensor_scalar(out, vals[:, :k], A.multiply, -1.0)
            words = _tile((pp, 2 * k), nl.int32)
            nisa.memset(words, 0)  # the high words (indices are non-negative)
            nisa.tensor_copy(words[:, ::2], found[:, :k])
            base = g * P * os_
            nisa.dma_copy(dst=values.ap([[os_, pp], [v_dstep, k]], offset=values.offset + oo + base), src=out)
            nisa.dma_copy(dst=indices.ap([[2 * os_, pp], [i_dstep, k], [1, 2]],
                                         offset=indices.offset + 2 * (oo + base)), src=words)


def _ties_in_top(x: torch.Tensor, k: int, dim: int, largest: bool) -> bool:
    """Whether any of the k chosen values of a row equals another element of the row (host view)."""
    s = x.float().sort(dim=dim, descending=largest).values.movedim(dim, -1)
    a, b = s[..., :min(k, s.shape[-1] - 1)], s[..., 1:k + 1]
    return bool(((a == b) | (a.isnan() & b.isnan())).any())


@native("aten::topk.default")
def plan_topk(call: Call) -> Launch | None:
    x = call.inputs[0]
    k, dim = call.arg(1, "k"), call.arg(2, "dim", -1)
    largest, ordered = call.arg(3, "largest", True), call.arg(4, "sorted", True)
    values, indices = call.outputs
    if x.dtype not in TOPK_DTYPES or values.dtype != x.dtype or x.dim() == 0 or not ordered:
        return None
    dim %= x.dim()
    n = x.shape[dim]
    if not 0 < k <= min(n, TOPK_MAX) or n > TOPK_ROW_MAX or values.stride() != indices.stride():
        return None
    layout = plan_layout(x, values, dim, True, False, True)
    if layout is None:
        return None

    def admit(inputs):  # (the smallest k of a row with NaN: negation would rank the NaN first)
        h = inputs[0]
        if not largest and h.is_floating_point() and bool(h.isnan().any()):
            return False
        return not _ties_in_top(h, k, dim, largest)

    statics = {"kept": layout.kept, "n": n, "step": layout.step, "k": k, "largest": bool(largest),
               "dim_steps": (values.stride(dim), 2 * indices.stride(dim))}
    return Launch(topk_kernel, (OUT(0), OUT(1), IN(0)), statics, admit=admit, flops=float(x.numel()) * k)


# ---------------------------------------------------------------- sort


def _keys(raw, shape, floats: bool, nan_last: bool, n: int, index_iota):
    """(key, order) fp32 tiles of loaded elements ``raw``: the key is the value (NaN as +inf); equal
    keys rank by ``order`` = index (+ n for NaN when ``nan_last``, for non-NaN otherwise)."""
    key = _tile(shape)
    nisa.tensor_copy(key, raw)
    if not floats:
        return key, index_iota
    nan = _tile(shape, nl.uint8)
    nisa.tensor_tensor(nan, key, key, A.not_equal)
    nisa.tensor_copy_predicated(key, math.inf, nan)
    order = _tile(shape)
    if nan_last:  # index + n * isnan
        nisa.scalar_tensor_tensor(order, nan, A.multiply, float(n), A.add, index_iota)
    else:  # index + n * (1 - isnan)
        nisa.scalar_tensor_tensor(order, nan, A.multiply, -float(n), A.add, index_iota)
        nisa.tensor_scalar(order, order, A.add, float(n))
    return key, order


def sort_kernel(values, indices, x, *, rows, n, steps, words, floats, descending):
    """Each row's elements scattered to their stable ranks (values and indices)."""
    x_step, v_step, i_step = steps
    chunks = [(i0, min(P, n - i0)) for i0 in range(0, n, P)]
    if len(rows) * len(chunks) > MAX_STEPS:
        raise Declined("too many row tiles")
    pp0 = min(P, n)
    free_iota = _tile((pp0, n))
    nisa.iota(free_iota, [[1, n]])
    beats = A.greater if descending else A.less
    for xb, vb, ib in rows:
        xb, vb, ib = xb + x.offset, vb + values.offset, ib + indices.offset
        wide_row = _tile((pp0, n), x.dtype)
        nisa.dma_copy(dst=wide_row, src=x.ap([[0, pp0], [x_step, n]], offset=xb))
        key_row, order_row = _keys(wide_row, (pp0, n), floats, not descending, n, free_iota)
        for i0, p in chunks:
            own = _tile((p, words), x.dtype)
            nisa.dma_copy(dst=own, src=x.ap([[x_step, p], [1, words]], offset=xb + i0 * x_step))
            own_iota = _tile((p, 1))
            nisa.iota(own_iota, [[0, 1]], offset=i0, channel_multiplier=1)
            key, order = _keys(own[:, 0:1], (p, 1), floats, not descending, n, own_iota)
            before = _tile((p, n))  # order_j < order_i
            nisa.tensor_scalar(before, order_row[:p], A.less, order)
            tied = _tile((p, n))  # key_j == key_i and j ranks first among equals
            nisa.scalar_tensor_tensor(tied, key_row[:p], A.equal, key, A.multiply, before)
            count = _tile((p, n))  # key_j beats key_i, or tied
            nisa.scalar_tensor_tensor(count, key_row[:p], beats, key, A.add, tied)
            rank = _tile((p, 1))
            nisa.tensor_reduce(rank, A.add, count, axis=1)
            for out, base, step, src_tile, w in ((values, vb, v_step, own, words),
                                                 (indices, ib, i_step, None, 2)):
                at = _tile((p, 1))
                nisa.tensor_scalar(at, rank, A.multiply, float(step))
                offs = _tile((p, 1), nl.int32)
                nisa.tensor_copy(offs, at)
                if src_tile is None:  # the index as an int64: (i, 0) words
                    src_tile = _tile((p, 2), nl.int32)
                    nisa.memset(src_tile, 0)
                    nisa.tensor_copy(src_tile[:, 0:1], own_iota)
                unit = out.ap([[1, 1], [1, 1]], offset=0)
                dst = unit.ap([[1, p], [1, w]], offset=base, vector_offset=offs, indirect_dim=0)
                nisa.dma_copy(dst=dst, src=src_tile)


def _row_bases(call: Call, dim: int, wide: bool) -> list[tuple[int, int, int]]:
    """(x, values, indices) offsets of every row, in elements of each view (int64: words)."""
    x = call.inputs[0]
    values, indices = call.outputs
    scale = (2 if wide else 1, 2 if wide else 1, 2)
    others = [d for d in range(x.dim()) if d != dim]
    rows = []
    for idx in itertools.product(*(range(x.shape[d]) for d in others)):
        rows.append(tuple(s * sum(i * t.stride(d) for i, d in zip(idx, others, strict=True))
                          for s, t in zip(scale, (x, values, indices), strict=True)))
    return rows


def _ties(x: torch.Tensor, dim: int) -> bool:
    s = x.sort(dim=dim, stable=True).values.movedim(dim, -1)
    a, b = s[..., :-1], s[..., 1:]
    return bool(((a == b) | (a.isnan() & b.isnan() if x.is_floating_point() else False)).any())


@native("aten::sort.default", "aten::sort.stable")
def plan_sort(call: Call) -> Launch | None:
    x = call.inputs[0]
    if call.op._overloadname == "stable":  # (self, *, stable, dim, descending)
        stable = bool(call.kwargs.get("stable") or False)
        dim, descending = call.kwargs.get("dim", -1), call.kwargs.get("descending", False)
    else:
        stable, dim, descending = False, call.arg(1, "dim", -1), call.arg(2, "descending", False)
    values, indices = call.outputs
    if x.dtype not in SORT_DTYPES or values.dtype != x.dtype or indices.dtype is not torch.int64:
        return None
    if x.dim() == 0 or numpy_dtype(torch.int32 if x.dtype is torch.int64 else x.dtype) is None:
        return None
    dim %= x.dim()
    n = x.shape[dim]
    if not 0 < n <= SORT_ROW_MAX or x.numel() * 2 >= EXACT:
        return None
    wide = x.dtype is torch.int64
    rows = _row_bases(call, dim, wide)
    w = 2 if wide else 1
    statics = {"rows": rows, "n": n, "words": w, "floats": x.dtype in FLOAT_DTYPES,
               "descending": bool(descending),
               "steps": (w * x.stride(dim), w * values.stride(dim), 2 * indices.stride(dim))}
    floats = x.dtype in FLOAT_DTYPES

    def admit(inputs):
        h = inputs[0]
        if not floats and h.numel() and int(h.abs().max()) >= EXACT:
            return False  # keys compare in fp32
        return stable or n <= STD_SORT_INSERTION or not _ties(h, dim)

    return Launch(sort_kernel, (OUT(0), OUT(1), IN(0)), statics, admit=admit,
                  int64_in_32_bits=wide, flops=float(x.numel()) * n * 4)
