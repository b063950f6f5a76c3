"""VectorE (and the element-wise calls that may run on ScalarE or GpSimd)."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from neuronsim.errors import DtypeError, UnsupportedError
from neuronsim.nki.isa.common import (
    _INT32,
    _describe,
    _engine,
    _fail,
    _is_tile,
    _same_shape,
    _scalar_or_vector,
    _scratch_tile,
    _tile,
    alu_op,
    emit,
)
from neuronsim.nki.isa.enums import (
    _RC,
    _UNKNOWN,
    engine,
    reduce_cmd,
)
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines.vector_bn import BN_AGGR_FIELDS, BN_STATS_FIELDS, BN_TUPLE
from neuronsim.sim.engines.vector_rng import RNG_DTYPES, STREAM_PERIOD
from neuronsim.sim.engines.vector_top_k import TOP_K, TOP_K_FREE_MAX
from neuronsim.sim.ir import AluOp, Engine, Memory, Opcode


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """Element-wise ``dst = data1 op data2`` on VectorE or GpSimd."""
    fn = "tensor_tensor"
    dst, data1, data2 = _tile(dst, "dst", fn), _tile(data1, "data1", fn), _tile(data2, "data2", fn)
    alu = alu_op(op)
    _same_shape(fn, data1, data2, "data1", "data2")
    _same_shape(fn, dst, data1, "dst", "data1")
    if data1.memory is Memory.PSUM and data2.memory is Memory.PSUM:
        raise _fail(fn, f"data1 and data2 cannot both be in PSUM ({_describe(data1)}, {_describe(data2)})")
    default = Engine.VECTOR
    if alu is AluOp.power or (
        dst.buf.dtype in _INT32 and data1.buf.dtype in _INT32 and data2.buf.dtype in _INT32
    ):  # GpSimd computes power and exact 32-bit integer arithmetic, but cannot reach PSUM
        psum = Memory.PSUM
        if dst.buf.memory is not psum and data1.buf.memory is not psum and data2.buf.memory is not psum:
            default = Engine.GPSIMD
    eng = default if engine is _UNKNOWN else _engine(engine, fn, (Engine.VECTOR, Engine.GPSIMD), default)
    emit(fn, Opcode.TENSOR_TENSOR, eng, dst, (data1, data2), {"op": alu}, name=name, roles=("data1", "data2"))


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
):
    """``dst = (data op0 operand0) op1 operand1``, scalar or [P, 1] operands (VectorE/ScalarE/GpSimd)."""
    fn = "tensor_scalar"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    _same_shape(fn, dst, data, "dst", "data")
    a0 = alu_op(op0, "op0")
    v0, t0 = _scalar_or_vector(fn, operand0, data, "operand0")
    srcs, roles = [data], ["data"]
    if t0 is not None:
        srcs.append(t0)
        roles.append("operand0")
    imm = {
        "op0": a0,
        "operand0": v0,
        "reverse0": bool(reverse0),
        "op1": None,
        "operand1": 0.0,
        "reverse1": bool(reverse1),
        "operand0_is_tile": t0 is not None,
        "operand1_is_tile": False,
    }
    if op1 is not None:
        imm["op1"] = alu_op(op1, "op1")
        v1, t1 = _scalar_or_vector(fn, operand1, data, "operand1")
        imm["operand1"] = v1
        imm["operand1_is_tile"] = t1 is not None
        if t1 is not None:
            srcs.append(t1)
            roles.append("operand1")
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.TENSOR_SCALAR, eng, dst, srcs, imm, name=name, roles=roles)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with operand1 a tile like data, on VectorE."""
    fn = "scalar_tensor_tensor"
    dst, data, operand1 = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(operand1, "operand1", fn)
    _same_shape(fn, dst, data, "dst", "data")
    _same_shape(fn, operand1, data, "operand1", "data")
    if data.memory is Memory.PSUM and operand1.memory is Memory.PSUM:
        raise _fail(fn, "data and operand1 cannot both be in PSUM")
    v0, t0 = _scalar_or_vector(fn, operand0, data, "operand0")
    srcs, roles = [data], ["data"]
    if t0 is not None:
        srcs.append(t0)
        roles.append("operand0")
    srcs.append(operand1)
    roles.append("operand1")
    imm = {
        "op0": alu_op(op0, "op0"),
        "operand0": v0,
        "operand0_is_tile": t0 is not None,
        "op1": alu_op(op1, "op1"),
    }
    if reverse0:
        imm["reverse0"] = True
    if reverse1:
        imm["reverse1"] = True
    emit(fn, Opcode.SCALAR_TENSOR_TENSOR, Engine.VECTOR, dst, srcs, imm, name=name, roles=roles)


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy ``src`` into ``dst`` (same partitions and elements per partition) on VectorE/ScalarE/GpSimd."""
    fn = "tensor_copy"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    _same_shape(fn, dst, src, "dst", "src")
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.TENSOR_COPY, eng, dst, (src,), {}, name=name)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with the constant ``value`` on VectorE or GpSimd."""
    fn = "memset"
    dst = _tile(dst, "dst", fn)
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.MEMSET, eng, dst, (), {"value": float(value)}, name=name)


def reciprocal(dst, data, name=None):
    """``dst = 1 / data`` on VectorE."""
    fn = "reciprocal"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    _same_shape(fn, dst, data, "dst", "data")
    imm = {
        "op0": AluOp.reciprocal,
        "operand0": 0.0,
        "reverse0": False,
        "op1": None,
        "operand1": 0.0,
        "reverse1": False,
        "operand0_is_tile": False,
        "operand1_is_tile": False,
    }
    emit(fn, Opcode.TENSOR_SCALAR, Engine.VECTOR, dst, (data,), imm, name=name, roles=("data",))


def reduce_axes(fn: str, data: TensorView, axis) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(int(a) for a in axis)
    nd = len(data.shape)
    axes = tuple(sorted(a + nd if a < 0 else a for a in axes))
    free_start = 1 if data.on_chip and data.ppair is None else 0
    if not axes or axes[0] < max(free_start, 1) or axes != tuple(range(axes[0], nd)):
        raise _fail(
            fn,
            f"axis={axis} must be the last contiguous free dimension(s) of {_describe(data)} "
            f"(e.g. {tuple(range(max(1, nd - 1), nd))}); the partition dimension cannot be reduced",
        )
    return axes


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce the trailing free ``axis`` dims of ``data`` with ``op`` on VectorE."""
    fn = "tensor_reduce"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    axes = reduce_axes(fn, data, axis)
    kept = math.prod(data.shape[1 : axes[0]]) if data.ppair is None else math.prod(data.shape[: axes[0]])
    if dst.partitions != data.partitions or dst.free_size != kept:
        raise _fail(
            fn,
            f"dst {_describe(dst)} must have {data.partitions} partitions and {kept} elements per "
            f"partition after reducing axes {axes} of {_describe(data)}",
        )
    if len(data.ap_pattern()) - 1 != len(data.shape) - (1 if data.ppair is None and data.on_chip else 0):
        raise _fail(fn, f"{_describe(data)} has too many free dims to reduce", UnsupportedError)
    imm = {"op": alu_op(op), "num_axes": len(axes), "negate": bool(negate)}
    emit(fn, Opcode.TENSOR_REDUCE, Engine.VECTOR, dst, (data,), imm, name=name, roles=("data",))


def tensor_scalar_reduce(
    dst,
    data,
    op0,
    operand0,
    reduce_op,
    reduce_res,
    reverse0=False,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_init=None,
    name=None,
):
    """``tensor_scalar`` with one operator, then its result reduced along the free dims (two instructions)."""
    if reduce_cmd not in (_RC.reset_reduce, "reset_reduce"):
        raise _fail(
            "tensor_scalar_reduce",
            f"reduce_cmd={reduce_cmd} is not simulated; use reset_reduce",
            UnsupportedError,
        )
    tensor_scalar(dst, data, op0, operand0, reverse0=reverse0, name=name)
    flat = dst.reshape((dst.shape[0], dst.free_size)) if dst.is_contiguous() and dst.ppair is None else dst
    tensor_reduce(reduce_res, reduce_op, flat, axis=tuple(range(1, len(flat.shape))), name=name)


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce,
                             name=None):
    """``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` along the free dims on VectorE (S16), the
    accumulator reset by op1 (``reset_reduce``: 0 for add/subtract, 1 for mult, -inf/+inf for
    max/min) or loaded with ``imm1`` (``load_reduce``). ``imm0``/``imm1``: a float or a [P, 1] fp32
    tile. ``reduce`` (carrying the accumulator over from an earlier instruction) is not simulated."""
    fn = "tensor_scalar_cumulative"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if reduce_cmd in (_RC.reduce, "reduce"):
        raise _fail(fn, "reduce_cmd=reduce continues VectorE's accumulator from an earlier instruction, "
                    "which is not simulated; use reset_reduce or load_reduce", UnsupportedError)
    if reduce_cmd not in (_RC.reset_reduce, "reset_reduce", _RC.load_reduce, "load_reduce"):
        raise _fail(fn, f"reduce_cmd={reduce_cmd} is not one of reset_reduce, reduce, load_reduce")
    load = reduce_cmd in (_RC.load_reduce, "load_reduce")
    _same_shape(fn, dst, src, "dst", "src")
    v0, t0 = _scalar_or_vector(fn, imm0, src, "imm0")
    srcs, roles = [src], ["src"]
    imm = {"op0": alu_op(op0, "op0"), "op1": alu_op(op1, "op1"), "imm0": v0, "imm0_is_tile": t0 is not None,
           "load": load}
    if t0 is not None:
        srcs.append(t0)
        roles.append("imm0")
    if load:
        if imm1 is None:
            raise _fail(fn, "reduce_cmd=load_reduce loads the accumulator from imm1; imm1 is None")
        v1, t1 = _scalar_or_vector(fn, imm1, src, "imm1")
        imm.update(imm1=v1, imm1_is_tile=t1 is not None)
        if t1 is not None:
            srcs.append(t1)
            roles.append("imm1")
    emit(fn, Opcode.TENSOR_SCALAR_CUMULATIVE, Engine.VECTOR, dst, srcs, imm, name=name, roles=roles)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """Scan along the free dim: ``dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i]`` on VectorE."""
    fn = "tensor_tensor_scan"
    dst, data0, data1 = _tile(dst, "dst", fn), _tile(data0, "data0", fn), _tile(data1, "data1", fn)
    if reverse0 or reverse1:
        raise _fail(fn, "reverse0/reverse1 are not simulated", UnsupportedError)
    _same_shape(fn, data0, data1, "data0", "data1")
    _same_shape(fn, dst, data0, "dst", "data0")
    v, t = _scalar_or_vector(fn, initial, data0, "initial")
    srcs, roles = [data0, data1], ["data0", "data1"]
    if t is not None:
        srcs.append(t)
        roles.append("initial")
    imm = {
        "op0": alu_op(op0, "op0"),
        "op1": alu_op(op1, "op1"),
        "initial": v,
        "initial_is_tile": t is not None,
    }
    emit(fn, Opcode.TENSOR_TENSOR_SCAN, Engine.VECTOR, dst, srcs, imm, name=name, roles=roles)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """Copy ``src`` into ``dst`` where ``predicate`` is true (false with ``reverse_pred``), on VectorE."""
    fn = "tensor_copy_predicated"
    dst, predicate = _tile(dst, "dst", fn), _tile(predicate, "predicate", fn)
    if predicate.buf.dtype not in (DType.uint8, DType.uint16, DType.uint32, DType.bool_):
        raise _fail(fn, f"predicate must be uint8/uint16/uint32; got {_describe(predicate)}", DtypeError)
    if not _is_tile(src):
        src = _constant_tile(dst.shape, src, dst.dtype)
    _same_shape(fn, dst, src, "dst", "src")
    _same_shape(fn, dst, predicate, "dst", "predicate")
    emit(
        fn,
        Opcode.TENSOR_COPY_PREDICATED,
        Engine.VECTOR,
        dst,
        (src, predicate),
        {"reverse_pred": bool(reverse_pred)},
        name=name,
        roles=("src", "predicate"),
    )


def _constant_tile(shape: tuple[int, ...], value, dtype) -> TensorView:
    """A new SBUF tile holding ``value`` everywhere (a VectorE memset), as ``nl.full`` makes it."""
    tile = _scratch_tile(shape, dtype, "full")
    memset(tile, float(value))
    return tile


def _broadcast_operand(value, like: TensorView, dtype) -> TensorView:
    """A view shaped like ``like`` of a scalar or [P, 1] operand (step-0 free dims)."""
    if not _is_tile(value):
        value = _constant_tile((like.partitions, 1), value, dtype)
    col = value.reshape((value.shape[0], 1)) if value.free_size == 1 and value.ppair is None else value
    return type(col)(col.buf, col.offset, (col.dims[0],) + tuple((0, n) for n in like.shape[1:]))


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    reduce_op=AluOp.maximum,
    reverse_pred=False,
    name=None,
):
    """``dst = where(predicate, on_true, on_false)`` on VectorE, with an optional max into ``reduce_res``."""
    fn = "select_reduce"
    dst, predicate, on_true = (
        _tile(dst, "dst", fn),
        _tile(predicate, "predicate", fn),
        _tile(on_true, "on_true", fn),
    )
    _same_shape(fn, dst, on_true, "dst", "on_true")
    _same_shape(fn, dst, predicate, "dst", "predicate")
    if _is_tile(on_false) and on_false.free_size == on_true.free_size:
        other = on_false
    else:
        other = _broadcast_operand(on_false, on_true, DType.float32)
    a, b = (other, on_true) if reverse_pred else (on_true, other)
    emit(
        fn,
        Opcode.SELECT,
        Engine.VECTOR,
        dst,
        (predicate, a, b),
        {},
        name=name,
        roles=("predicate", "on_true", "on_false"),
    )
    if reduce_res is not None:
        flat = dst.reshape((dst.shape[0], dst.free_size)) if dst.is_contiguous() else dst
        tensor_reduce(reduce_res, reduce_op, flat, axis=tuple(range(1, len(flat.shape))), name=name)


def bn_stats(dst, data, name=None):
    """Per-partition mean/variance statistics of ``data`` (<= 512 elements) into ``dst`` [P, 6] (VectorE)."""
    fn = "bn_stats"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    limit = current_trace().chip.bn_stats_free_max
    if data.free_size > limit:
        raise _fail(
            fn,
            f"data {_describe(data)} has {data.free_size} elements per partition; the limit is {limit} "
            f"(nl.tile_size.bn_stats_fmax)",
        )
    if dst.partitions != data.partitions or dst.free_size != BN_STATS_FIELDS:
        raise _fail(fn, f"dst must be [{data.partitions}, {BN_STATS_FIELDS}]; got {_describe(dst)}")
    emit(fn, Opcode.BN_STATS, Engine.VECTOR, dst, (data,), {}, name=name, roles=("data",))


def bn_aggr(dst, data, name=None):
    """Aggregate ``bn_stats`` outputs into ``dst`` [P, 2] = (mean, variance), on VectorE."""
    fn = "bn_aggr"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    if data.free_size % BN_TUPLE:  # bn_stats' rows are two such tuples
        raise _fail(fn, f"data {_describe(data)} must hold bn_stats results (a multiple of {BN_STATS_FIELDS} "
                    f"per partition)")
    if dst.partitions != data.partitions or dst.free_size != BN_AGGR_FIELDS:
        raise _fail(fn, f"dst must be [{data.partitions}, {BN_AGGR_FIELDS}]; got {_describe(dst)}")
    emit(fn, Opcode.BN_AGGR, Engine.VECTOR, dst, (data,), {}, name=name, roles=("data",))


def max8(dst, src, name=None):
    """The 8 largest values of each partition of ``src``, descending, into ``dst`` [P, 8] (VectorE)."""
    fn = "max8"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if not TOP_K <= src.free_size <= TOP_K_FREE_MAX:
        raise _fail(fn, f"src {_describe(src)} must have {TOP_K} to {TOP_K_FREE_MAX} elements per partition")
    if dst.partitions != src.partitions or dst.free_size != TOP_K:
        raise _fail(fn, f"dst must be [{src.partitions}, {TOP_K}]; got {_describe(dst)}")
    emit(fn, Opcode.MAX8, Engine.VECTOR, dst, (src,), {}, name=name)


def nc_find_index8(dst, data, vals, name=None):
    """Index of the first occurrence of each of the 8 ``vals`` in each partition of ``data`` (VectorE)."""
    fn = "nc_find_index8"
    dst, data, vals = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(vals, "vals", fn)
    if vals.free_size != TOP_K or dst.free_size != TOP_K:
        raise _fail(fn, f"vals and dst need {TOP_K} elements per partition ({_describe(vals)}, "
                    f"{_describe(dst)})")
    emit(fn, Opcode.NC_FIND_INDEX8, Engine.VECTOR, dst, (data, vals), {}, name=name, roles=("data", "vals"))


# ---------------------------------------------------------------- the PRNG (sim/engines/vector_rng.py)


@dataclass
class _RngStream:
    """A trace's PRNG state: the [1, 1] tile the last ``set_rng_seed`` copied its seed into, and how
    many stream elements the rng/dropout calls since then drew (the next call's ``offset``)."""

    state: TensorView
    drawn: int = 0

    def draw(self, n: int) -> int:
        offset = self.drawn % STREAM_PERIOD
        self.drawn += n
        return offset


_STREAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Trace -> _RngStream


def _state_tile(trace, dtype: DType) -> TensorView:
    buf = trace.new_tile("rng_state", Memory.SBUF, (1, 1), dtype, caller_location(3), "rng_state")
    return TensorView.whole(buf)


def _stream(fn: str) -> _RngStream:
    trace = current_trace()
    stream = _STREAMS.get(trace)
    if stream is None:  # never seeded: seed 0, so an unseeded kernel is deterministic too
        state = _state_tile(trace, DType.uint32)
        emit(fn, Opcode.MEMSET, Engine.VECTOR, state, (), {"value": 0.0}, name="rng_default_seed")
        stream = _STREAMS[trace] = _RngStream(state)
    return stream


def set_rng_seed(src_seeds, name=None):
    """Seed the PRNG from the 32-bit value of a [1, 1] SBUF/PSUM tile: a VectorE copy of it becomes the
    state later ``rng`` / ``dropout`` calls read, so the same seed gives the same sequence (S16)."""
    fn = "set_rng_seed"
    src = _tile(src_seeds, "src_seeds", fn)
    if not src.on_chip:
        raise _fail(fn, f"src_seeds must be in SBUF or PSUM; got {_describe(src)}")
    if src.partitions != 1 or src.free_size != 1:
        raise _fail(fn, f"src_seeds must be a [1, 1] tile; got {_describe(src)}")
    if src.buf.dtype.itemsize != 4:
        raise _fail(fn, f"src_seeds must hold a 32-bit value; got {_describe(src)}", DtypeError)
    trace = current_trace()
    state = _state_tile(trace, src.buf.dtype)  # same dtype: the copy keeps the bits
    emit(fn, Opcode.TENSOR_COPY, Engine.VECTOR, state, (src,), {}, name=name or fn, roles=("src_seeds",))
    _STREAMS[trace] = _RngStream(state)


def rng(dst, engine=engine.unknown, name=None):
    """Fill ``dst`` (int8/16/32, uint8/16/32) with 32 random bits per element, truncated to its dtype's
    low bits, on VectorE (default) or GpSimd (SBUF only). Both draw from the simulated stream."""
    fn = "rng"
    dst = _tile(dst, "dst", fn)
    if dst.buf.dtype not in RNG_DTYPES:
        raise _fail(fn, f"dst must be an integer tile ({', '.join(sorted(d.name for d in RNG_DTYPES))}); "
                    f"got {_describe(dst)}", DtypeError)
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.GPSIMD), Engine.VECTOR)
    stream = _stream(fn)
    offset = stream.draw(dst.partitions * dst.free_size)
    emit(fn, Opcode.RNG, eng, dst, (stream.state,), {"offset": offset}, name=name, roles=("rng_state",))


def dropout(dst, data, prob, name=None):
    """``dst = data`` with each element replaced by zero with probability ``prob`` (a scalar, or a
    [P, 1] tile: one probability per partition) on VectorE; dst has data's dtype (S16)."""
    fn = "dropout"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    _same_shape(fn, dst, data, "dst", "data")
    if dst.buf.dtype != data.buf.dtype:
        raise _fail(fn, f"dst must have data's dtype; dst = {_describe(dst)}, data = {_describe(data)}",
                    DtypeError)
    value, tile = _scalar_or_vector(fn, prob, data, "prob")
    if tile is not None and data.buf.dtype.is_int and tile.buf.dtype is not DType.float32:
        raise _fail(fn, f"prob must be float32 for integer data; got {_describe(tile)}", DtypeError)
    stream = _stream(fn)
    imm = {"offset": stream.draw(dst.partitions * dst.free_size), "prob": value,
           "prob_is_tile": tile is not None}
    srcs = (data, stream.state) if tile is None else (data, stream.state, tile)
    emit(fn, Opcode.DROPOUT, Engine.VECTOR, dst, srcs, imm, name=name,
         roles=("data", "rng_state", "prob")[: len(srcs)])


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0,
                name=None):
    """``dst = exp(src - max_value)`` on VectorE (NeuronCore-v4 on), with the sum of the results into
    ``reduce_res`` under ``reset_reduce`` (from 0) or ``load_reduce`` (from ``reduce_init``) (S16)."""
    fn = "exponential"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    _same_shape(fn, dst, src, "dst", "src")
    cmd = getattr(reduce_cmd, "name", reduce_cmd)
    if cmd not in ("idle", "reset_reduce", "load_reduce"):
        raise _fail(fn, f"reduce_cmd={cmd}: continuing the VectorE accumulator of an earlier instruction is "
                    f"not simulated; use reset_reduce or load_reduce", UnsupportedError)
    if reduce_res is not None and cmd == "idle":
        raise _fail(fn, "reduce_res with reduce_cmd=idle reads an accumulator whose state is unknown (S16); "
                    "use reset_reduce or load_reduce", UnsupportedError)
    if _is_tile(reduce_init):
        raise _fail(fn, "a reduce_init tile is not simulated; pass a float", UnsupportedError)
    if cmd != "load_reduce" and float(reduce_init) != 0.0:
        raise _fail(fn, f"reduce_init={reduce_init} is used by reduce_cmd=load_reduce only (S16: leave it "
                    "0.0)")
    value, tile = _scalar_or_vector(fn, max_value, src, "max_value")
    srcs, roles = [src], ["src"]
    if tile is not None:
        srcs.append(tile)
        roles.append("max_value")
    imm = {"max_value": value, "max_is_tile": tile is not None, "reduce_init": float(reduce_init)}
    dst2 = _tile(reduce_res, "reduce_res", fn) if reduce_res is not None else None
    emit(fn, Opcode.EXPONENTIAL, Engine.VECTOR, dst, srcs, imm, name=name, dst2=dst2, roles=roles)
