"""GpSimd: ``iota``, ``affine_select``, ``tensor_partition_reduce``, ``nc_n_gather``."""

from __future__ import annotations

import math

import numpy as np

from neuronsim.errors import DtypeError
from neuronsim.nki.isa.common import (
    _describe,
    _fail,
    _same_shape,
    _tile,
    alu_op,
    emit,
)
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AluOp, Engine, Opcode


def _pattern(fn: str, pattern) -> tuple[tuple[int, int], ...]:
    pairs = tuple((int(s), int(n)) for s, n in pattern)
    if not 1 <= len(pairs) <= 4:
        raise _fail(fn, f"pattern {pattern} must have 1 to 4 [step, num] pairs")
    return pairs


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """``dst[p, ...] = offset + p * channel_multiplier + sum(i_k * step_k)`` on GpSimd."""
    fn = "iota"
    dst = _tile(dst, "dst", fn)
    pairs = _pattern(fn, pattern)
    if math.prod(n for _, n in pairs) != dst.free_size:
        raise _fail(
            fn,
            f"pattern {pattern} has {math.prod(n for _, n in pairs)} elements but dst {_describe(dst)} "
            f"has {dst.free_size} per partition",
        )
    imm = {"pattern": pairs, "offset": int(offset), "channel_multiplier": int(channel_multiplier)}
    emit(fn, Opcode.IOTA, Engine.GPSIMD, dst, (), imm, name=name)


def affine_select(
    dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=AluOp.equal, offset=0, name=None
):
    """``dst = on_true_tile`` where ``cmp_op(affine(p, i), 0)`` holds, else ``on_false_value`` (GpSimd)."""
    fn = "affine_select"
    dst, on_true_tile = _tile(dst, "dst", fn), _tile(on_true_tile, "on_true_tile", fn)
    pairs = _pattern(fn, pattern)
    _same_shape(fn, dst, on_true_tile, "dst", "on_true_tile")
    if math.prod(n for _, n in pairs) != dst.free_size:
        raise _fail(
            fn,
            f"pattern {pattern} has {math.prod(n for _, n in pairs)} elements but dst has "
            f"{dst.free_size} per partition",
        )
    imm = {
        "pattern": pairs,
        "offset": int(offset),
        "channel_multiplier": int(channel_multiplier),
        "cmp_op": alu_op(cmp_op, "cmp_op"),
        "on_false_value": float(on_false_value),
    }
    emit(
        fn, Opcode.AFFINE_SELECT, Engine.GPSIMD, dst, (on_true_tile,), imm, name=name, roles=("on_true_tile",)
    )


def tensor_partition_reduce(dst, op, data, name=None):
    """Reduce ``data`` [P, F] across partitions into ``dst`` [1, F] on GpSimd."""
    fn = "tensor_partition_reduce"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    if dst.partitions != 1 or dst.free_size != data.free_size:
        raise _fail(fn, f"dst must be [1, {data.free_size}]; got {_describe(dst)}")
    emit(
        fn,
        Opcode.TENSOR_PARTITION_REDUCE,
        Engine.GPSIMD,
        dst,
        (data,),
        {"op": alu_op(op)},
        name=name,
        roles=("data",),
    )


def nc_n_gather(dst, data, indices, name=None):
    """``dst[p, k] = data[p, indices[p, k]]`` with data's free dims flattened, on GpSimd (SBUF only);
    dst keeps data's dtype, indices are uint32 with dst's elements per partition (S16)."""
    fn = "nc_n_gather"
    dst, data, indices = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(indices, "indices", fn)
    if dst.buf.dtype != data.buf.dtype:
        raise _fail(fn, f"dst must have data's dtype; dst = {_describe(dst)}, data = {_describe(data)}",
                    DtypeError)
    if indices.buf.dtype is not DType.uint32:
        raise _fail(fn, f"indices must be uint32; got {_describe(indices)}", DtypeError)
    if not data.partitions == indices.partitions == dst.partitions:
        raise _fail(fn, f"data, indices and dst must have the same partitions; data = {_describe(data)}, "
                    f"indices = {_describe(indices)}, dst = {_describe(dst)}")
    if indices.free_size != dst.free_size:
        raise _fail(fn, f"dst must have as many elements per partition as indices; dst = {_describe(dst)}, "
                    f"indices = {_describe(indices)}")
    emit(fn, Opcode.NC_N_GATHER, Engine.GPSIMD, dst, (data, indices), {}, name=name,
         roles=("data", "indices"))


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """Per GpSimd core (partitions 0, 16, ..., 112 only): the positions of src's nonzero elements plus
    ``index_offset``, then ``padding_val``, then their count, into int32 dst with one more element per
    partition than src (float32 or int32); dst's other partitions are left as they are (S16)."""
    fn = "nonzero_with_count"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if src.buf.dtype not in (DType.float32, DType.int32):
        raise _fail(fn, f"src must be float32 or int32; got {_describe(src)}", DtypeError)
    if dst.buf.dtype is not DType.int32:
        raise _fail(fn, f"dst must be int32; got {_describe(dst)}", DtypeError)
    if src.partitions != dst.partitions or dst.free_size != src.free_size + 1:
        raise _fail(fn, f"dst must have src's partitions and one more element per partition (the count); "
                    f"src = {_describe(src)}, dst = {_describe(dst)}")
    imm = {"index_offset": _int32(fn, "index_offset", index_offset),
           "padding_val": _int32(fn, "padding_val", padding_val)}
    emit(fn, Opcode.NONZERO_WITH_COUNT, Engine.GPSIMD, dst, (src,), imm, name=name, roles=("src",))


def _int32(fn: str, what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -2**31 <= value < 2**31:
        raise _fail(fn, f"{what}={value!r} must be an int32 (a Python int known at trace time)")
    return int(value)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Each GpSimd core (16 partitions) gathers ``num_elem_per_idx`` elements of every one of its
    partitions at each of its uint16 ``index`` values (its 16 partitions' indices flattened partition
    first, the first ``num_valid_indices``); dst keeps src_buffer's dtype (S16)."""
    fn = "local_gather"
    dst, src, index = _tile(dst, "dst", fn), _tile(src_buffer, "src_buffer", fn), _tile(index, "index", fn)
    if dst.buf.dtype != src.buf.dtype:
        raise _fail(fn, f"dst must have src_buffer's dtype; dst = {_describe(dst)}, src_buffer = "
                    f"{_describe(src)}", DtypeError)
    if index.buf.dtype is not DType.uint16:
        raise _fail(fn, f"index must be uint16; got {_describe(index)}", DtypeError)
    if not src.partitions == index.partitions == dst.partitions or src.partitions % 16:
        raise _fail(fn, f"src_buffer, index and dst must have the same partitions, a multiple of 16 (one "
                    f"GpSimd core each); src_buffer = {_describe(src)}, index = {_describe(index)}, "
                    f"dst = {_describe(dst)}")
    if num_valid_indices is None:
        num_valid_indices = index.free_size * 16
    imm = {"num_elem_per_idx": _int32(fn, "num_elem_per_idx", num_elem_per_idx),
           "num_valid_indices": _int32(fn, "num_valid_indices", num_valid_indices)}
    if dst.free_size != imm["num_valid_indices"] * imm["num_elem_per_idx"]:
        raise _fail(fn, f"dst must have num_valid_indices * num_elem_per_idx = "
                    f"{imm['num_valid_indices'] * imm['num_elem_per_idx']} elements per partition; "
                    f"got {_describe(dst)}")
    emit(fn, Opcode.LOCAL_GATHER, Engine.GPSIMD, dst, (src, index), imm, name=name,
         roles=("src_buffer", "index"))


def topk(val_dst, idx_dst, src, n, name=None):
    """The K largest of each 16-partition group's ``n`` bf16 snake elements (position ``s`` at
    partition ``s % 16``, column ``s // 16``), K = val_dst's elements per partition: their values
    (bf16) and positions (uint32) in ascending order, written as a snake at positions 0..K-1 only
    (S16, NKI 0.6; sim/engines/gpsimd_topk.py)."""
    fn = "topk"
    val, idx, src = _tile(val_dst, "val_dst", fn), _tile(idx_dst, "idx_dst", fn), _tile(src, "src", fn)
    for role, v, want in (("src", src, DType.bfloat16), ("val_dst", val, DType.bfloat16),
                          ("idx_dst", idx, DType.uint32)):
        if v.buf.dtype is not want:
            raise _fail(fn, f"{role} must be {want.name}; got {_describe(v)}", DtypeError)
    if not src.partitions == val.partitions == idx.partitions or src.partitions % 16:
        raise _fail(fn, f"src, val_dst and idx_dst must have the same partitions, a multiple of 16 (a "
                    f"snake per GpSimd core); src = {_describe(src)}, val_dst = {_describe(val)}, "
                    f"idx_dst = {_describe(idx)}")
    n = _int32(fn, "n", n)
    if not 8 <= n < 65536 or n > 16 * src.free_size:
        raise _fail(fn, f"n={n}: topk needs 8 <= n < 65536 and src free size >= ceil(n / 16) = "
                    f"{-(-n // 16)}; src = {_describe(src)}")
    k = val.free_size
    if not 1 <= k < 32768 or k > n or idx.free_size != k:
        raise _fail(fn, f"K = val_dst's free size {k} must satisfy 1 <= K < 32768 and K <= n={n}, "
                    f"and idx_dst must have K elements per partition; val_dst = {_describe(val)}, idx_dst = "
                    f"{_describe(idx)}")
    emit(fn, Opcode.TOPK, Engine.GPSIMD, val, (src,), {"n": n}, name=name, dst2=idx, roles=("src",))


def sequence_bounds(dst, segment_ids, name=None):
    """For each of one partition's segment ids (float32 or int32; 0 is padding): the first index of
    its run of equal ids and one past the last, into dst [1, 2, n] (starts, then ends; padding gets n
    and -1), on GpSimd (S16; sim/engines/gpsimd_sequence.py)."""
    fn = "sequence_bounds"
    dst, ids = _tile(dst, "dst", fn), _tile(segment_ids, "segment_ids", fn)
    for role, v in (("segment_ids", ids), ("dst", dst)):
        if v.buf.dtype not in (DType.float32, DType.int32):
            raise _fail(fn, f"{role} must be float32 or int32; got {_describe(v)}", DtypeError)
    if ids.partitions != 1 or dst.partitions != 1 or dst.free_size != 2 * ids.free_size:
        raise _fail(fn, f"segment_ids must be one partition [1, n] and dst [1, 2, n]; segment_ids = "
                    f"{_describe(ids)}, dst = {_describe(dst)}")
    emit(fn, Opcode.SEQUENCE_BOUNDS, Engine.GPSIMD, dst, (ids,), {}, name=name, roles=("segment_ids",))
