"""VectorE calls that pick elements or partitions: ``nc_match_replace8`` (top-k folding, beside ``max8``
and ``nc_find_index8`` in ``vector.py``), ``range_select`` (a bounds mask with a fused max) and
``nc_stream_shuffle`` (partitions within 32-partition quadrants)."""

from __future__ import annotations

import numpy as np

from neuronsim.errors import DtypeError, UnsupportedError
from neuronsim.nki.isa.common import _describe, _fail, _same_shape, _tile, alu_op, emit
from neuronsim.nki.isa.enums import _RC, reduce_cmd
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines.vector_range_select import FILL_VALUE, INDEX_EXACT_MAX, RANGE_COMPARE_OPS
from neuronsim.sim.engines.vector_top_k import TOP_K, TOP_K_FREE_MAX
from neuronsim.sim.ir import QUADRANT, SHUFFLE_KEEP, AluOp, Engine, Opcode


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """``dst = data`` with the first occurrence of each of the 8 ``vals`` (taken vals[7] first, so a
    repeated value claims successive occurrences) replaced by ``imm``; their indices into ``dst_idx``
    (uint16/uint32 [P, 8]) if given (VectorE)."""
    fn = "nc_match_replace8"
    dst, data, vals = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(vals, "vals", fn)
    if not TOP_K <= data.free_size <= TOP_K_FREE_MAX:
        raise _fail(fn, f"data {_describe(data)} must have {TOP_K} to {TOP_K_FREE_MAX} elements per "
                    "partition")
    if vals.partitions != data.partitions or vals.free_size != TOP_K:
        raise _fail(fn, f"vals must be [{data.partitions}, {TOP_K}]; got {_describe(vals)}")
    _same_shape(fn, dst, data, "dst", "data")
    if dst_idx is not None:
        dst_idx = _tile(dst_idx, "dst_idx", fn)
        if dst_idx.partitions != data.partitions or dst_idx.free_size != TOP_K:
            raise _fail(fn, f"dst_idx must be [{data.partitions}, {TOP_K}]; got {_describe(dst_idx)}")
        if dst_idx.buf.dtype not in (DType.uint16, DType.uint32):
            raise _fail(fn, f"dst_idx must be uint16 or uint32; got {_describe(dst_idx)}", DtypeError)
    emit(fn, Opcode.NC_MATCH_REPLACE8, Engine.VECTOR, dst, (data, vals), {"imm": float(imm)}, name=name,
         dst2=dst_idx, roles=("data", "vals"))


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Cross-partition move within each 32-partition quadrant (VectorE): dst partition ``q*32 + i``
    takes src partition ``q*32 + shuffle_mask[i]``; a mask entry of 255 leaves that dst partition
    unmodified. The same mask applies to every quadrant; dst may be src (in place) (S16)."""
    fn = "nc_stream_shuffle"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    try:
        mask = tuple(shuffle_mask)
    except TypeError:
        raise _fail(fn, f"shuffle_mask must be a list of {QUADRANT} ints; got {shuffle_mask!r}") from None
    if len(mask) != QUADRANT or not all(isinstance(m, int) and not isinstance(m, bool) for m in mask):
        raise _fail(fn, f"shuffle_mask must be a list of {QUADRANT} ints; got {shuffle_mask!r}")
    bad = [(i, m) for i, m in enumerate(mask) if not (0 <= m < QUADRANT or m == SHUFFLE_KEEP)]
    if bad:
        i, m = bad[0]
        raise _fail(fn, f"shuffle_mask[{i}] = {m}; each entry is a partition 0..{QUADRANT - 1} "
                    f"of the quadrant or {SHUFFLE_KEEP} (leave that dst partition unmodified)")
    if dst.buf.dtype != src.buf.dtype:
        raise _fail(fn, f"dst must have src's dtype; dst = {_describe(dst)}, src = {_describe(src)}",
                    DtypeError)
    if dst.free_size != src.free_size:
        raise _fail(fn, f"dst and src must have the same elements per partition; dst = {_describe(dst)}, "
                    f"src = {_describe(src)}")
    for i in range(dst.partitions):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP and (i // QUADRANT) * QUADRANT + m >= src.partitions:
            raise _fail(fn, f"dst partition {i} takes src partition {(i // QUADRANT) * QUADRANT + m} "
                        f"(shuffle_mask[{i % QUADRANT}] = {m} in quadrant {i // QUADRANT}) but src "
                        f"{_describe(src)} has {src.partitions} partitions")
    emit(fn, Opcode.NC_STREAM_SHUFFLE, Engine.VECTOR, dst, (src,), {"mask": mask}, name=name, roles=("src",))



def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=AluOp.maximum, range_start=0, on_false_value=FILL_VALUE,
                 name=None):
    """``dst = on_true_tile`` where ``comp_op0(i, bound0) and comp_op1(i, bound1)`` for the free index
    ``i = range_start + j``, else FP32_MIN; the row maximum into ``reduce_res`` (VectorE, S16)."""
    fn = "range_select"
    dst, data = _tile(dst, "dst", fn), _tile(on_true_tile, "on_true_tile", fn)
    bound0, bound1 = _tile(bound0, "bound0", fn), _tile(bound1, "bound1", fn)
    cmp = [alu_op(comp_op0, "comp_op0"), alu_op(comp_op1, "comp_op1")]
    for role, op in zip(("comp_op0", "comp_op1"), cmp, strict=True):
        if op not in RANGE_COMPARE_OPS:
            raise _fail(fn, f"{role}={op.name}; range_select compares with equal, less, less_equal, greater "
                        "or greater_equal")
    if alu_op(reduce_op, "reduce_op") is not AluOp.maximum:
        raise _fail(fn, f"reduce_op={reduce_op}; range_select reduces by maximum only")
    if reduce_cmd not in (_RC.reset_reduce, "reset_reduce"):
        raise _fail(fn, f"reduce_cmd={reduce_cmd} is not simulated (the VectorE accumulator registers are "
                    "not modelled); use reset_reduce", UnsupportedError)
    if np.float32(on_false_value) != np.float32(FILL_VALUE):
        raise _fail(fn, f"on_false_value={on_false_value}; hardware fills with FP32_MIN ({FILL_VALUE}) only")
    if not isinstance(range_start, int) or not 0 <= range_start <= INDEX_EXACT_MAX - data.free_size:
        raise _fail(fn, f"range_start={range_start!r}: a compile-time integer with range_start + index "
                    "< 2^24")
    if not data.buf.dtype.is_float:
        raise _fail(fn, f"on_true_tile must hold floats; got {_describe(data)}", DtypeError)
    for role, b in (("bound0", bound0), ("bound1", bound1)):
        if b.partitions != data.partitions or b.free_size != 1:
            raise _fail(fn, f"{role} must be [{data.partitions}, 1]; got {_describe(b)}")
        if b.buf.dtype is not DType.float32:
            raise _fail(fn, f"{role} must be float32; got {_describe(b)}", DtypeError)
    _same_shape(fn, dst, data, "dst", "on_true_tile")
    if reduce_res is not None:
        reduce_res = _tile(reduce_res, "reduce_res", fn)
        if reduce_res.partitions != data.partitions or reduce_res.free_size != 1:
            raise _fail(fn, f"reduce_res must be [{data.partitions}, 1]; got {_describe(reduce_res)}")
    imm = {"cmp0": cmp[0], "cmp1": cmp[1], "range_start": int(range_start), "on_false": FILL_VALUE}
    emit(fn, Opcode.RANGE_SELECT, Engine.VECTOR, dst, (data, bound0, bound1), imm, name=name, dst2=reduce_res,
         roles=("on_true_tile", "bound0", "bound1"))
