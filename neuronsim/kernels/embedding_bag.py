"""``embedding_bag`` forward (``_embedding_bag`` / ``_embedding_bag_forward_only``), modes sum and
mean, with ``per_sample_weights``, ``padding_idx`` and ``include_last_offset`` as
``nn.EmbeddingBag`` passes them; values bit-exact against ATen-CPU.

ATen-CPU (fbgemm) sums a bag's rows in index order, each step a fused multiply-add
``acc = fma(row, weight, acc)`` in fp32 (a plain add without weights), and a mean divides the sum
by the bag's count. TensorE's matmul is that chain: ``dst = sum_k stationary[k, m] * moving[k, n]``
runs k in order as fused multiply-adds. Per tile of ``BAGS`` bags and ``CHUNK`` indices:

- the indirect DMA gathers the indices' weight rows (bytes) onto partitions 64..127;
- VectorE gives each index its bag (how many offsets are at or before it; ATen-CPU's last bag
  runs to the end even under ``include_last_offset``) and its factor (its per-sample weight, 0 for
  padding): the stationary's rows 64..127 are
  ``factor * (bag == b)``; rows 0..63 are an identity that carries the bags' running sums,
  copied back from PSUM, in front of the next chunk's rows, so the chain runs on across chunks;
- a column of ones after the rows counts each bag's indices (the mean's divisor).

A zero factor adds an exact zero (the sums are finite: a table or weights holding inf/NaN runs on
the host, ``0 * inf`` being NaN). The other results are what ATen-CPU returns: ``offset2bag`` (each
index's bag; empty for sum without ``padding_idx``), ``bag_size`` (the counts; zeros for sum) and
``max_indices`` (``bag_size`` again for mean, zeros for sum: the same tensor, which only the
backward reads). The backward (``_embedding_bag_backward``, dense) is the transposed matmul:
the indices' one-hot rows times their factors, the grad rows gathered by bag, PSUM summing over
index chunks (fp32, rounded once: within fp32 rounding of ATen-CPU, which sums in its sorted-index
order). Mode max, ``scale_grad_by_freq``, 16-bit tables and the per-sample weights' own gradient run
on the host.
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.index_dma import _indexed
from neuronsim.kernels.indexing import IndexWords, all_finite, indices_within
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
BAGS = 64  # bags per tile: the stationary's identity rows (partitions 0..63)
CHUNK = 64  # indices per matmul: partitions 64..127 (an access starts at a multiple of 32)
D_MAX = 511  # row elements per matmul, plus the count column: one PSUM bank of fp32
MAX_STEPS = 4096
MM_FREE = 512  # moving free size of one matmul: one PSUM bank of fp32


def _tile(shape, dtype=F32, buffer=None):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer or nl.sbuf)


def _store_int64(view, t, rows):
    """int64 results from the fp32 column ``t[rows]``: (value, 0) word pairs."""
    words = _tile((128, 2), nl.int32)
    nisa.memset(words[rows], 0)
    nisa.tensor_copy(words[rows, 0:1], t[rows])
    nisa.dma_copy(dst=view, src=words[rows])


def embedding_bag_kernel(out, offset2bag, bag_size, weight, indices, offsets, *psw, bags, n, d,
                         mean, pad, want_o2b):
    words, starts = IndexWords(indices, True), IndexWords(offsets, True)
    v_step, d_step = weight.dims[0][0], weight.dims[1][0]
    chunks = [(i0, min(CHUNK, n - i0)) for i0 in range(0, n, CHUNK)]
    tiles = [(b0, min(BAGS, bags - b0)) for b0 in range(0, bags, BAGS)]
    if len(chunks) * len(tiles) > MAX_STEPS:
        raise Declined("too many steps")
    cols = _tile((128, BAGS))  # 0..63 along the free axis
    nisa.iota(cols, [[1, BAGS]])
    ident = _tile((BAGS, BAGS))  # the running sums' rows
    rows_p = _tile((BAGS, 1))
    nisa.iota(rows_p, [[0, 1]], channel_multiplier=1)
    nisa.tensor_scalar(ident, cols[:BAGS], A.equal, rows_p)
    # per chunk (on partitions 64..127): its rows with the count column, each index's bag and factor
    per_chunk = []
    for i0, c in chunks:
        at = slice(BAGS, BAGS + c)
        moving = _tile((128, d + 1))
        ids = _tile((128, 1))
        words.column(i0, c, into=ids[at])
        scaled = _tile((128, 1))
        nisa.tensor_scalar(scaled[at], ids[at], A.multiply, float(v_step))
        offs = _tile((128, 1), nl.int32)
        nisa.tensor_copy(offs[at], scaled[at])
        nisa.dma_copy(dst=moving[at, :d], src=_indexed(weight, weight.offset, offs[at], c, d_step, d))
        nisa.memset(moving[at, d:d + 1], 1.0)
        pos = _tile((128, 1))
        nisa.iota(pos[at], [[0, 1]], offset=i0, channel_multiplier=1)
        firsts = _tile((128, bags))
        starts.row(0, bags, c, into=firsts[at])
        before = _tile((128, bags))
        bag = _tile((128, 1))
        nisa.tensor_scalar(before[at], firsts[at, :bags], A.less_equal, pos[at])
        nisa.tensor_reduce(bag[at], A.add, before[at], axis=1)
        nisa.tensor_scalar(bag[at], bag[at], A.subtract, 1.0)
        factor = _tile((128, 1))
        nisa.memset(factor[at], 1.0)
        if pad >= 0:
            nisa.scalar_tensor_tensor(factor[at], ids[at], A.not_equal, float(pad), A.multiply, factor[at])
        if psw:
            w = _tile((128, 1))
            step = psw[0].dims[0][0]
            nisa.dma_copy(dst=w[at], src=psw[0].ap([[step, c], [1, 1]], offset=psw[0].offset + i0 * step))
            nisa.tensor_tensor(factor[at], factor[at], w[at], A.multiply)
        if want_o2b:
            _store_int64(offset2bag.ap([[2, c], [1, 2]], offset=offset2bag.offset + 2 * i0), bag, at)
        per_chunk.append((c, at, moving, bag, factor))
    for b0, mb in tiles:
        acc = None
        for c, at, moving, bag, factor in per_chunk:
            stat = _tile((128, BAGS))
            nisa.tensor_copy(stat[:BAGS], ident)
            rel = _tile((128, 1))
            nisa.tensor_scalar(rel[at], bag[at], A.subtract, float(b0))
            nisa.tensor_scalar(stat[at], cols[at], A.equal, rel[at], op1=A.multiply, operand1=factor[at])
            if acc is None:
                nisa.memset(moving[:BAGS], 0.0)
            else:
                nisa.tensor_copy(moving[:BAGS], acc)
            acc = _tile((BAGS, d + 1), buffer=nl.psum)
            nisa.nc_matmul(acc, stat[:BAGS + c], moving[:BAGS + c])
        res = _tile((mb, d + 1))
        nisa.tensor_copy(res, acc[:mb])
        y = _tile((mb, d), out.dtype)
        if mean:  # an empty bag's sum, 0, over 1
            div = _tile((mb, 1))
            nisa.tensor_scalar(div, res[:, d:d + 1], A.maximum, 1.0)
            nisa.tensor_scalar(y, res[:, :d], A.divide, div)
        else:
            nisa.tensor_copy(y, res[:, :d])
        o_step = out.dims[0][0]
        nisa.dma_copy(dst=out.ap([[o_step, mb], [out.dims[1][0], d]], offset=out.offset + b0 * o_step), src=y)
        counts = _tile((128, 1))
        if mean:
            nisa.tensor_copy(counts[:mb], res[:, d:d + 1])
        else:
            nisa.memset(counts[:mb], 0.0)
        _store_int64(bag_size.ap([[2, mb], [1, 2]], offset=bag_size.offset + 2 * b0), counts, slice(0, mb))


@native("aten::_embedding_bag.default", "aten::_embedding_bag_forward_only.default")
def plan_embedding_bag(call: Call) -> Launch | None:
    weight, indices, offsets = call.arg(0, "weight"), call.arg(1, "indices"), call.arg(2, "offsets")
    scale, mode = call.arg(3, "scale_grad_by_freq", False), call.arg(4, "mode", 0)
    psw, last, pad = call.arg(6, "per_sample_weights"), call.arg(7, "include_last_offset", False), \
        call.arg(8, "padding_idx", -1)
    if mode not in (0, 1) or scale or weight.dtype is not torch.float32 or weight.dim() != 2:
        return None
    if indices.dtype is not torch.int64 or offsets.dtype is not torch.int64:
        return None
    if indices.dim() != 1 or offsets.dim() != 1:
        return None
    if psw is not None and (psw.dtype is not torch.float32 or mode != 0 or psw.dim() != 1):
        return None
    n, d, v = indices.shape[0], weight.shape[1], weight.shape[0]
    bags = offsets.shape[0] - (1 if last else 0)
    out, offset2bag, bag_size, _ = call.outputs
    if not (0 < n and 0 < bags and 0 < d <= D_MAX and v < 2**24 and bag_size.shape[0] >= bags):
        return None
    if pad is None:
        pad = -1
    pad = pad % v if pad < -1 or pad >= 0 else -1
    want_o2b = mode == 1 or pad >= 0  # (ATen-CPU's sum leaves offset2bag empty)
    positions = [next(i for i, t in enumerate(call.inputs) if t is x) for x in (weight, indices, offsets)]
    operands = (OUT(0), OUT(1), OUT(2), *(IN(p) for p in positions))
    if psw is not None:
        operands += (IN(next(i for i, t in enumerate(call.inputs) if t is psw)),)

    def admit(inputs):
        w_in, ids, offs = (inputs[p] for p in positions)
        if not (indices_within(ids, v) and all_finite(w_in)) \
                or (psw is not None and not all_finite(inputs[-1])):
            return False
        return int(offs[0]) == 0 and bool((offs[1:] >= offs[:-1]).all()) and int(offs[-1]) <= n

    def result(outs):
        y, o2b, sizes = outs[:3]
        sizes = sizes[:bags]  # (the meta kernel gives include_last_offset's bag_size one too many)
        return y, (o2b if want_o2b else o2b[:0]), sizes, sizes  # max_indices: bag_size's values (see above)

    return Launch(embedding_bag_kernel, operands,
                  {"bags": bags, "n": n, "d": d, "mean": mode == 1, "pad": pad,
                   "want_o2b": want_o2b},
                  admit=admit, result=result, flops=2.0 * n * d * max(1, -(-bags // BAGS)))


# ---------------------------------------------------------------- backward


def embedding_bag_backward_kernel(out, grad, indices, offsets, bag_size, *psw, bags, n, d, v, mean, pad):
    """``out[r] = sum_i [indices[i] == r] * factor_i * grad[bag_i]`` (factor: the per-sample weight,
    or 1 / bag size for mean; 0 for padding): indices on the contraction partitions, the one-hot of
    their rows times the factor the stationary, the grad rows the indirect DMA gathers by bag the
    moving operand; PSUM accumulates over index chunks (fp32 sums, rounded once)."""
    P = 128
    words, starts = IndexWords(indices, True), IndexWords(offsets, True)
    g_step, gd_step = grad.dims[0][0], grad.dims[1][0]
    chunks = [(i0, min(P, n - i0)) for i0 in range(0, n, P)]
    rows = [(r0, min(P, v - r0)) for r0 in range(0, v, P)]
    cols_d = [(c0, min(MM_FREE, d - c0)) for c0 in range(0, d, MM_FREE)]
    if len(chunks) * len(rows) * len(cols_d) > MAX_STEPS:
        raise Declined("too many steps")
    row_ids = _tile((P, min(P, v)))
    nisa.iota(row_ids, [[1, min(P, v)]])
    prepared = []
    for i0, c in chunks:
        ids = words.column(i0, c)
        pos = _tile((c, 1))
        nisa.iota(pos, [[0, 1]], offset=i0, channel_multiplier=1)
        firsts = starts.row(0, bags, c)
        before = _tile((c, bags))
        bag = _tile((c, 1))
        nisa.tensor_scalar(before, firsts, A.less_equal, pos)
        nisa.tensor_reduce(bag, A.add, before, axis=1)
        nisa.tensor_scalar(bag, bag, A.subtract, 1.0)
        at = _tile((c, 1))
        nisa.tensor_scalar(at, bag, A.multiply, float(g_step))
        offs = _tile((c, 1), nl.int32)
        nisa.tensor_copy(offs, at)
        rows_g = _tile((c, d), grad.dtype)
        nisa.dma_copy(dst=rows_g, src=_indexed(grad, grad.offset, offs, c, gd_step, d))
        factor = _tile((c, 1))
        nisa.memset(factor, 1.0)
        if pad >= 0:
            nisa.scalar_tensor_tensor(factor, ids, A.not_equal, float(pad), A.multiply, factor)
        if psw:
            w = _tile((c, 1))
            step = psw[0].dims[0][0]
            nisa.dma_copy(dst=w, src=psw[0].ap([[step, c], [1, 1]], offset=psw[0].offset + i0 * step))
            nisa.tensor_tensor(factor, factor, w, A.multiply)
        if mean:  # 1 / bag size, gathered by bag (the low words of bag_size)
            nisa.tensor_scalar(at, bag, A.multiply, float(bag_size.dims[0][0]))
            offs2 = _tile((c, 1), nl.int32)
            nisa.tensor_copy(offs2, at)
            size = _tile((c, 1), nl.int32)
            nisa.dma_copy(dst=size, src=_indexed(bag_size, bag_size.offset, offs2, c, 1, 1))
            sizef = _tile((c, 1))
            nisa.tensor_scalar(sizef, size, A.maximum, 1.0)
            nisa.tensor_tensor(factor, factor, sizef, A.divide)
        prepared.append((c, ids, rows_g, factor))
    for r0, vr in rows:
        for c0, cs in cols_d:
            acc = _tile((vr, cs), buffer=nl.psum)
            for c, ids, rows_g, factor in prepared:
                rel = _tile((c, 1))
                nisa.tensor_scalar(rel, ids, A.subtract, float(r0))
                hot = _tile((c, vr))
                nisa.tensor_scalar(hot, row_ids[:c, :vr], A.equal, rel, op1=A.multiply, operand1=factor)
                moving = rows_g[:, c0:c0 + cs]
                if grad.dtype != F32:
                    moving = _tile((c, cs))
                    nisa.tensor_copy(moving, rows_g[:, c0:c0 + cs])
                nisa.nc_matmul(acc, hot, moving)
            res = _tile((vr, cs), out.dtype)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(dst=out.ap([[out.dims[0][0], vr], [out.dims[1][0], cs]],
                                     offset=out.offset + r0 * out.dims[0][0] + c0 * out.dims[1][0]), src=res)


@native("aten::_embedding_bag_backward.default")
def plan_embedding_bag_backward(call: Call) -> Launch | None:
    grad, indices, offsets = call.arg(0, "grad"), call.arg(1, "indices"), call.arg(2, "offsets")
    bag_size, v = call.arg(4, "bag_size"), call.arg(6, "num_weights")
    scale, mode, sparse = call.arg(7, "scale_grad_by_freq"), call.arg(8, "mode"), call.arg(9, "sparse")
    psw, pad = call.arg(10, "per_sample_weights"), call.arg(11, "padding_idx", -1)
    if scale or sparse or mode not in (0, 1) or grad.dtype is not torch.float32 or grad.dim() != 2:
        return None
    if indices.dtype is not torch.int64 or offsets.dtype is not torch.int64 or indices.dim() != 1:
        return None
    if psw is not None and (psw.dtype is not torch.float32 or psw.dim() != 1):
        return None
    n, (bags, d) = indices.shape[0], grad.shape
    out = call.outputs[0]
    if not (0 < n and 0 < bags <= offsets.shape[0] and 0 < v < 2**24 and tuple(out.shape) == (v, d)):
        return None
    if mode == 1 and (bag_size.dtype is not torch.int64 or bag_size.shape[0] < bags):
        return None
    pad = -1 if pad is None or pad == -1 else pad % v
    tensors = [grad, indices, offsets, bag_size] + ([psw] if psw is not None else [])
    positions = [next(i for i, t in enumerate(call.inputs) if t is x) for x in tensors]

    def admit(inputs):
        return indices_within(inputs[positions[1]], v) and all_finite(inputs[positions[0]]) and int(
            inputs[positions[2]][0]) == 0

    return Launch(embedding_bag_backward_kernel, (OUT(0), *(IN(p) for p in positions)),
                  {"bags": bags, "n": n, "d": d, "v": v, "mean": mode == 1, "pad": pad},
                  admit=admit, flops=2.0 * n * d * v)
