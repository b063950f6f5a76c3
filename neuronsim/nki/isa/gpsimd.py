"""GpSimd: ``iota``, ``affine_select``, ``tensor_partition_reduce``, ``nc_n_gather``."""

from __future__ import annotations

import math

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
