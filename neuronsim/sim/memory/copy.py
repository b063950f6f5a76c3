"""Bit-exact copies and transposes between encoded access patterns (Numba, trusted inputs):
``copy_by_runs``, ``copy_raw`` and ``transpose_raw``, used by the DMA queues, tensor_copy and the
PE-array transpose. Element ``k`` of the source goes to element ``k`` of the destination, both in
row-major order, bits untouched; every path gives the reference's read-everything-then-write
result.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from neuronsim.sim.ir import MAX_FREE_DIMS
from neuronsim.sim.memory.access import (
    F_DIMS,
    F_DTYPE,
    F_PARTS,
    F_PITCH,
    ITEMSIZE,
    ap_free,
    ap_parts,
    disjoint,
    gather_raw,
    row_address,
    row_offsets,
    scatter_raw,
    store_rows_raw,
)
from neuronsim.sim.memory.numerics import load_u16, load_u32, store_u16, store_u32


@intrinsic
def _memcpy(typingctx, dst_addr, src_addr, nbytes):
    """``memcpy`` between byte addresses (the ranges must not overlap)."""
    def codegen(context, builder, signature, args):
        dst, src, n = (context.cast(builder, a, t, types.int64)
                       for a, t in zip(args, signature.args, strict=True))
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(dst, i8p), builder.inttoptr(src, i8p), n, 1)
        return context.get_dummy_value()

    return types.void(dst_addr, src_addr, nbytes), codegen


@intrinsic
def _ptr_like(typingctx, addr, like):
    """A pointer to elements of ``like``'s dtype at byte address ``addr`` (one kernel body for
    every word size, the dtype fixed at compile time by the caller's choice of ``like``)."""
    if not isinstance(addr, types.Integer) or not isinstance(like, types.Array):
        return None

    def codegen(context, builder, signature, args):
        address = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.inttoptr(address, context.get_value_type(like.dtype).as_pointer())

    return types.CPointer(like.dtype)(addr, like), codegen


# Bit-exact moves between APs that share no byte go as one loop nest over both sides: the element
# order is row-major on both, so where each side's dims can be split at the other's boundaries the
# copy is a nest of (size, src step, dst step) dims. Its order is free when no dst byte is written
# twice, so the dims go outermost-first by dst step (dst written in address order, one stream the
# prefetchers follow); then the innermost dim is a memcpy run when contiguous on both sides, a tile
# transpose when src is contiguous along another dim, or a word loop. Overlapping moves keep the
# read-all-then-write path.

_MAX_NEST = 2 * (MAX_FREE_DIMS + 1)
_MIN_RUN_BYTES = 16  # shorter runs go word by word (a memcpy call costs more)
_U8_LIKE, _U16_LIKE, _U32_LIKE = np.empty(0, np.uint8), np.empty(0, np.uint16), np.empty(0, np.uint32)


@njit(cache=True)
def _side_dims(row, at, out):
    """The AP's dims with more than one element, outer first (partitions, then the free dims), as
    (size, byte step) rows of ``out``; their count."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    k = 0
    if row[at + F_PARTS] != 1:
        out[0, 0], out[0, 1] = row[at + F_PARTS], row[at + F_PITCH]
        k = 1
    for d in range(MAX_FREE_DIMS):
        step, num = row[at + F_DIMS + 2 * d], row[at + F_DIMS + 2 * d + 1]
        if num != 1:
            out[k, 0], out[k, 1] = num, step * item
            k += 1
    return k


@njit(cache=True)
def _copy_nest(row, dst_at, src_at):
    """The copy as a loop nest: rows (size, src byte step, dst byte step) of a [_MAX_NEST, 3]
    array, innermost last, and their count; -1 when the two sides' dims have no common split."""
    sd, dd = np.empty((MAX_FREE_DIMS + 1, 2), np.int64), np.empty((MAX_FREE_DIMS + 1, 2), np.int64)
    i_s, i_d = _side_dims(row, src_at, sd) - 1, _side_dims(row, dst_at, dd) - 1
    nest = np.empty((_MAX_NEST, 3), np.int64)
    k = _MAX_NEST
    rem_s = sd[i_s, 0] if i_s >= 0 else 1
    rem_d = dd[i_d, 0] if i_d >= 0 else 1
    step_s = sd[i_s, 1] if i_s >= 0 else 0
    step_d = dd[i_d, 1] if i_d >= 0 else 0
    while i_s >= 0 and i_d >= 0:  # from the inner end: split the longer dim at the shorter's size
        m = min(rem_s, rem_d)
        if rem_s % m or rem_d % m:
            return nest, -1
        k -= 1
        nest[k, 0], nest[k, 1], nest[k, 2] = m, step_s, step_d
        rem_s, rem_d, step_s, step_d = rem_s // m, rem_d // m, step_s * m, step_d * m
        if rem_s == 1:
            i_s -= 1
            if i_s >= 0:
                rem_s, step_s = sd[i_s, 0], sd[i_s, 1]
        if rem_d == 1:
            i_d -= 1
            if i_d >= 0:
                rem_d, step_d = dd[i_d, 0], dd[i_d, 1]
    count = _MAX_NEST - k
    return nest[k:].copy(), count


@njit(cache=True)
def _order_nest(nest, item):
    """Sort the dims outermost-first by |dst step| when that leaves no dst byte written twice
    (then the order does not change the result), and merge dims contiguous on both sides; the new
    count, and whether the order is free (else it stays row-major)."""
    k = nest.shape[0]
    order = nest.copy()
    for i in range(1, k):  # insertion sort, stable: ties keep row-major order
        j = i
        while j > 0 and abs(order[j - 1, 2]) < abs(order[j, 2]):
            for c in range(3):
                order[j - 1, c], order[j, c] = order[j, c], order[j - 1, c]
            j -= 1
    span = item
    injective = True
    for i in range(k - 1, -1, -1):
        if abs(order[i, 2]) < span:
            injective = False
        span += abs(order[i, 2]) * (order[i, 0] - 1)
    if injective:
        nest[:] = order
    n = 0
    for i in range(k):  # merge dim i into the previous (outer) one when it continues it
        if (n > 0 and nest[n - 1, 1] == nest[i, 0] * nest[i, 1]
                and nest[n - 1, 2] == nest[i, 0] * nest[i, 2]):
            nest[n - 1, 0] *= nest[i, 0]
            nest[n - 1, 1], nest[n - 1, 2] = nest[i, 1], nest[i, 2]
        else:
            nest[n] = nest[i]
            n += 1
    return n, injective


@njit(cache=True, inline="always")
def _advance(idx, nest, last):
    """Step the odometer ``idx`` over dims 0 .. last of ``nest``; the (src, dst) byte deltas."""
    ds = dd = 0
    for j in range(last, -1, -1):
        idx[j] += 1
        ds += nest[j, 1]
        dd += nest[j, 2]
        if idx[j] < nest[j, 0]:
            return ds, dd
        ds -= nest[j, 1] * nest[j, 0]
        dd -= nest[j, 2] * nest[j, 0]
        idx[j] = 0
    return ds, dd


@njit(cache=True)
def _copy_runs(d0, s0, nest, k, nbytes):
    """memcpy ``nbytes`` at each point of dims 0 .. k - 1."""
    idx = np.zeros(max(k, 1), np.int64)
    total = 1
    for j in range(k):
        total *= nest[j, 0]
    for _ in range(total):
        _memcpy(d0, s0, nbytes)
        ds, dd = _advance(idx, nest, k - 1)
        s0 += ds
        d0 += dd


@njit(cache=True)
def _copy_nest_words(d0, s0, nest, k, t, like):
    """Words of ``like``'s dtype over the nest: with ``t`` >= 0, dims t and k - 1 are a tile
    transpose (src contiguous along t, dst along k - 1); otherwise a word loop along dim k - 1."""
    item = like.itemsize
    total = 1
    for j in range(k - 1):
        if j != t:
            total *= nest[j, 0]
    outer = nest[:k - 1].copy()
    if t >= 0:
        outer[t, 0] = 1  # the tile dim is walked inside
    idx = np.zeros(max(k - 1, 1), np.int64)
    n, s_step, d_step = nest[k - 1, 0], nest[k - 1, 1], nest[k - 1, 2]
    for _ in range(total):
        if t >= 0:
            _transpose_words(d0, s0, n, nest[t, 0], s_step // item, nest[t, 2] // item, like)
        else:
            for i in range(n):
                word = carray(_ptr_like(s0 + i * s_step, like), (1,))[0]
                carray(_ptr_like(d0 + i * d_step, like), (1,))[0] = word
        ds, dd = _advance(idx, outer, k - 2)
        s0 += ds
        d0 += dd


@njit(cache=True)
def copy_by_runs(row, dst_at, src_at, bases):
    """Copy src to dst (same element size) over their common loop nest (see above); False
    (nothing copied) when they overlap or their dims have no common split."""
    if not disjoint(row, dst_at, src_at, bases):
        return False
    nest, k = _copy_nest(row, dst_at, src_at)
    if k < 0:
        return False
    item = ITEMSIZE[row[src_at + F_DTYPE]]
    k, free_order = _order_nest(nest, item)
    s0, d0 = row_address(row, src_at, bases, 0), row_address(row, dst_at, bases, 0)
    if k == 0:
        _memcpy(d0, s0, item)
        return True
    aligned = s0 % item == 0 and d0 % item == 0
    for j in range(k):
        aligned = aligned and nest[j, 1] % item == 0 and nest[j, 2] % item == 0
    run = nest[k - 1, 1] == item and nest[k - 1, 2] == item
    if run and (nest[k - 1, 0] * item >= _MIN_RUN_BYTES or not aligned):
        _copy_runs(d0, s0, nest, k - 1, nest[k - 1, 0] * item)
        return True
    if not aligned:
        return False
    t = -1
    if free_order and nest[k - 1, 2] == item and not run:  # a dim where src is contiguous: a transpose
        for j in range(k - 1):
            if nest[j, 1] == item:
                t = j
    if item == 4:  # the dtype chosen here, outside every loop
        _copy_nest_words(d0, s0, nest, k, t, _U32_LIKE)
    elif item == 2:
        _copy_nest_words(d0, s0, nest, k, t, _U16_LIKE)
    else:
        _copy_nest_words(d0, s0, nest, k, t, _U8_LIKE)
    return True


@njit(cache=True)
def _element_offsets(row, at):
    """Byte offsets [N] of a row's elements from its first (``row_offsets``, also when contiguous)."""
    offsets = row_offsets(row, at)
    if offsets.size == 0:
        offsets = np.arange(ap_free(row, at)) * ITEMSIZE[row[at + F_DTYPE]]
    return offsets


@njit(cache=True)
def _copy_words(row, dst_at, src_at, bases, item):
    """Element k of src to element k of dst as 4- or 2-byte words, straight from memory to memory
    (no bit-pattern array in between); the APs must not overlap. The two sides may split the
    elements into partitions differently (an HBM side is one long row, say)."""
    s_off, d_off = _element_offsets(row, src_at), _element_offsets(row, dst_at)
    ns, nd = s_off.size, d_off.size
    s_pitch, d_pitch = row[src_at + F_PITCH], row[dst_at + F_PITCH]
    s0, d0 = row_address(row, src_at, bases, 0), row_address(row, dst_at, bases, 0)
    if ns == 0 or nd == 0:
        return
    pd, jd = 0, 0
    for ps in range(ap_parts(row, src_at)):
        s_row = s0 + ps * s_pitch
        js = 0
        while js < ns:
            # the longest stretch that stays in one dst partition: a plain loop LLVM can unroll
            count = min(ns - js, nd - jd)
            d_row = d0 + pd * d_pitch
            if item == 4:
                for c in range(count):
                    store_u32(d_row + d_off[jd + c], load_u32(s_row + s_off[js + c]))
            else:
                for c in range(count):
                    store_u16(d_row + d_off[jd + c], load_u16(s_row + s_off[js + c]))
            js += count
            jd += count
            if jd == nd:
                jd = 0
                pd += 1


@njit(cache=True)
def copy_raw(row, dst_at, src_at, bases):
    """Bit-exact copy of element k of src to element k of dst (row-major), same dtype. All of src
    is read before dst is written, as in the reference."""
    if copy_by_runs(row, dst_at, src_at, bases):
        return
    item = ITEMSIZE[row[src_at + F_DTYPE]]
    if (item == 4 or item == 2) and disjoint(row, dst_at, src_at, bases):
        _copy_words(row, dst_at, src_at, bases, item)
        return
    values = gather_raw(row, src_at, bases).reshape(-1)
    store_rows_raw(row, dst_at, bases, 0, row_offsets(row, dst_at), values)


_TILE = 16  # transposes go by TILE x TILE blocks: both sides' lines stay in L1


@njit(cache=True)
def _transpose_words(d0, s0, parts, n, s_pitch, d_pitch, like):
    """``d[f, p] = s[p, f]`` for words of ``like``'s dtype at byte addresses ``d0`` / ``s0``
    (pitches in words). Whole tiles index fixed-size row views (no bounds to keep, so LLVM
    unrolls them); the ragged edges go word by word."""
    item = like.itemsize
    pt, nt = parts - parts % _TILE, n - n % _TILE
    for p0 in range(0, pt, _TILE):
        for f0 in range(0, nt, _TILE):
            for j in range(_TILE):
                d = carray(_ptr_like(d0 + ((f0 + j) * d_pitch + p0) * item, like), (_TILE,))
                for i in range(_TILE):
                    d[i] = carray(_ptr_like(s0 + ((p0 + i) * s_pitch + f0) * item, like), (_TILE,))[j]
    for p in range(parts):  # the edges: columns past the last whole tile, then rows
        s = carray(_ptr_like(s0 + p * s_pitch * item, like), (n,))
        for f in range(nt if p < pt else 0, n):
            carray(_ptr_like(d0 + (f * d_pitch + p) * item, like), (1,))[0] = s[f]


@njit(cache=True)
def transpose_raw(row, dst_at, src_at, bases):
    """Bit-exact ``dst[f, p] = src[p, f]`` (same dtype; dst has src's free size as partitions).
    Contiguous, aligned, disjoint 2- and 4-byte rows move as words; anything else through
    int64 bit patterns."""
    item = ITEMSIZE[row[src_at + F_DTYPE]]
    parts, n = ap_parts(row, src_at), ap_free(row, src_at)
    s0, d0 = row_address(row, src_at, bases, 0), row_address(row, dst_at, bases, 0)
    s_pitch, d_pitch = row[src_at + F_PITCH], row[dst_at + F_PITCH]
    plain = ((item == 4 or item == 2) and row_offsets(row, src_at).size == 0
             and row_offsets(row, dst_at).size == 0 and s0 % item == 0 and d0 % item == 0
             and s_pitch % item == 0 and d_pitch % item == 0 and (s_pitch >= n * item or parts == 1)
             and (d_pitch >= parts * item or n == 1) and disjoint(row, dst_at, src_at, bases))
    if not plain:
        scatter_raw(row, dst_at, bases, np.ascontiguousarray(gather_raw(row, src_at, bases).T))
    elif item == 4:
        _transpose_words(d0, s0, parts, n, s_pitch // 4, d_pitch // 4, _U32_LIKE)
    else:
        _transpose_words(d0, s0, parts, n, s_pitch // 2, d_pitch // 2, _U16_LIKE)
