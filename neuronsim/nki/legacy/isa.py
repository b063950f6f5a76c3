"""``neuronxcc.nki.isa``: the NKI 0.1 instruction calls, which return their result instead of taking
``dst`` first, on top of ``neuronsim.nki.isa`` (one implementation of each instruction).

A call such as ``t[...] = nisa.tensor_copy(x)`` records one instruction writing ``t[...]``, as the
legacy compiler does: the result is :class:`Deferred` until the next statement shows where it goes.
Assigned to a tile (``t[...] = r``) it is computed into that tile; accumulated into PSUM
(``psum[...] += nisa.nc_matmul(a, b)``) it is a matmul accumulating there; used any other way — or
when any other instruction is recorded first — it is computed into a new tile of its own. Calls with
``mask=`` are computed at once (``legacy/call.py``). Signatures follow the NKI 0.1 API stubs
(aws-neuron-sdk 2.26, ``general/nki/api/nki/isa``).
"""

from __future__ import annotations

import enum
import math

from neuronsim.errors import UnsupportedError
from neuronsim.nki import isa as _isa
from neuronsim.nki.isa.enums import (  # noqa: F401 (the legacy namespace re-exports them)
    dge_mode,
    engine,
    oob_mode,
    reduce_cmd,
)
from neuronsim.nki.isa.vector import reduce_axes
from neuronsim.nki.language import tensor as _lt
from neuronsim.nki.language.dtypes import float32, psum, sbuf
from neuronsim.nki.legacy import hints
from neuronsim.nki.legacy.call import materialize, run, run_into
from neuronsim.nki.legacy.grid import IndexExpr, Mask, resolve
from neuronsim.nki.trace import caller_location, current_trace, overriding_location
from neuronsim.sim.ir import AluOp, Memory


class nc_version(enum.IntEnum):
    """NKI 0.1's NeuronCore versions, ordered (kernels test ``get_nc_version() >= nc_version.gen3``)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    return nc_version[_isa.get_nc_version().name]


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd
)
unknown_engine = engine.unknown


class Deferred:
    """The result of a legacy ``nisa`` call, recorded once its destination is known."""

    def __init__(self, fn: str, shape, dtype, buffer, emit):
        self.fn = fn
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype
        self.buffer = buffer
        self.emit = emit  # emit(dst, accumulate: bool | None)
        self.location = caller_location()
        self.tile = None
        trace = current_trace()
        if trace.pending is not None:
            flush, trace.pending = trace.pending, None
            flush()
        trace.pending = self._flush

    def _record(self, dst, accumulate=None) -> None:
        with overriding_location(self.location):
            self.emit(dst, accumulate)

    def _flush(self) -> None:
        if self.tile is None:
            tile = _lt.alloc(self.shape, self.dtype, self.buffer, tag=self.fn)
            self.tile = tile  # set first: the record below may flush nothing else
            self._record(tile)

    def _take(self) -> bool:
        """True when this result is still waiting (and now claimed by the caller)."""
        trace = current_trace()
        if self.tile is None and trace.pending == self._flush:
            trace.pending = None
            return True
        return False

    def nki_materialize(self):
        if self._take():
            self._flush()
        return self.tile

    def nki_assign_into(self, dst) -> None:
        # into dst directly when it is where the instruction writes (a PE transpose or matmul
        # assigned to an SBUF tile is computed in PSUM and copied, as the compiler does)
        fits = (
            math.prod(dst.shape) == math.prod(self.shape)
            and dst.memory is _region(self.buffer)
            and (self.fn in _CASTING or dst.buf.dtype is _lt.sim_dtype(self.dtype))
        )
        if fits and self._take():
            self._record(dst, False)
            self.tile = dst
            return
        _lt.assign(dst, self.nki_materialize())

    def nki_accumulate_into(self, dst) -> None:
        if self.fn == "nc_matmul" and dst.memory is Memory.PSUM and self._take():
            hints.hint("psum[...] += nisa.nc_matmul", location=self.location)
            self._record(dst, None)
            self.tile = dst
            return
        _lt.assign(dst, _lt.binary(dst, self.nki_materialize(), AluOp.add, None, "add"))

    # used as a tensor: the result in its own tile
    def __getattr__(self, name):
        if name in ("tile", "emit", "fn", "shape", "dtype", "buffer", "location"):
            raise AttributeError(name)
        return getattr(self.nki_materialize(), name)

    def __getitem__(self, key):
        return self.nki_materialize()[key]

    def __setitem__(self, key, value):
        self.nki_materialize()[key] = value

    def __repr__(self) -> str:
        return f"<nisa.{self.fn} result {self.shape}>"


# instructions whose output dtype is their dst's (the others write their operand's dtype)
_CASTING = frozenset({"activation", "activation_reduce", "tensor_tensor", "tensor_scalar", "tensor_copy",
                      "scalar_tensor_tensor", "reciprocal", "tensor_reduce", "tensor_scalar_reduce",
                      "tensor_tensor_scan", "memset", "iota", "affine_select", "tensor_partition_reduce",
                      "dropout", "nc_matmul"})


def _region(buffer) -> Memory:
    return Memory.PSUM if buffer is psum else Memory.SBUF


def _operator(name):
    def method(self, *args):
        return getattr(self.nki_materialize(), name)(*args)

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__pow__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__",
              "__xor__", "__neg__", "__len__"):
    setattr(Deferred, _name, _operator(_name))


def _result(fn, shape, dtype, buffer, emit, mask, operands, result_axes=None):
    """A Deferred result, or with ``mask=`` the result computed now (into a full-size tile)."""
    hints.hint(f"nisa.{fn}(...) returning its result", f"nisa.{fn}(dst, ...) (dst first, no return)")
    if len(shape) == 1:  # NKI 0.1 tiles may be [P]: a [P, 1] column
        shape = tuple(shape) + (1,)
    if mask is None or mask is True or (isinstance(mask, Mask) and mask.ranges() == {}):
        # a mask that keeps everything (a Python condition, `(2 * i + g) * 128 < n`, is a bool):
        # no mask, so `psum[...] += nisa.nc_matmul(..., mask=...)` still accumulates in PSUM
        return Deferred(fn, shape, dtype, buffer, emit)
    return run_into(emit, shape, dtype, buffer, operands, mask, result_axes)


def _t(x):
    """An operand tile (deferred results computed, grid views checked)."""
    return resolve(materialize(x), {})


def _dt(dtype, default):
    return default if dtype is None else dtype


# ------------------------------------------------------------------ TensorE


def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, **kwargs):
    """``stationary.T @ moving`` into a new PSUM tile (float32)."""
    s, m = materialize(stationary), materialize(moving)
    shape = (_free(s), _free(m))

    def emit(dst, accumulate, s=None, m=None):
        # TensorE reads SBUF only: an operand in PSUM (an nc_transpose result) is copied out first
        s = _lt.sbuf_operand(_t(stationary) if s is None else s, "nc_matmul.psum_copy")
        m = _lt.sbuf_operand(_t(moving) if m is None else m, "nc_matmul.psum_copy")
        _isa.nc_matmul(dst, s, m, is_stationary_onezero, is_moving_onezero, is_transpose,
                       accumulate=accumulate, tile_position=tile_position, tile_size=tile_size)

    dtype = _t(s).dtype if is_transpose else float32
    return _result("nc_matmul", shape, dtype, psum, emit, mask, (s, m), [(0, 1), (1, 1)])


def _free(x) -> int:
    return math.prod(x.shape[1:]) if len(x.shape) > 1 else 1


def nc_transpose(data, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    d = materialize(data)
    p, f = d.shape[0], _free(d)
    on_pe = engine == _isa.engine.tensor or (engine in (None, _isa.engine.unknown) and max(p, f) > 32)
    buffer = psum if on_pe else sbuf

    def emit(dst, accumulate, x=None):
        _isa.nc_transpose(dst, _t(data) if x is None else x, engine=engine)

    return _result("nc_transpose", (f, p), _dt(dtype, d.dtype), buffer, emit, mask, (d,), [(0, 1), (0, 0)])


# ------------------------------------------------------------------ ScalarE


def _bias(bias):
    """ScalarE reads its bias as float32: another dtype is cast first (VectorE), as the NKI 0.1
    compiler accepted any bias dtype."""
    if bias is None:
        return None
    b = _t(bias)
    if not hasattr(b, "buf") or b.buf.dtype is _lt.sim_dtype(float32):
        return b
    out = _lt.new_tile(b.shape, float32, "activation.bias_f32")
    _isa.tensor_copy(out, b)
    return out


def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.activation(dst, op, _t(data) if x is None else x, bias=_bias(bias),
                        scale=_t(scale), reduce_op=reduce_op,
                        reduce_res=_t(reduce_res) if reduce_res is not None else None, reduce_cmd=reduce_cmd)

    return _result("activation", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.activation_reduce(dst, op, _t(data) if x is None else x, reduce_op, _t(reduce_res),
                               bias=_bias(bias), scale=_t(scale))

    return _result("activation_reduce", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


# ------------------------------------------------------------------ VectorE


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    a, b = materialize(data1), materialize(data2)

    def emit(dst, accumulate, x=None, y=None):
        _isa.tensor_tensor(dst, _t(a) if x is None else x, _t(b) if y is None else y, op, engine=engine)

    dtype = _dt(dtype, _lt.result_dtype(_t(a), _t(b)))
    return _result("tensor_tensor", a.shape, dtype, sbuf, emit, mask, (a, b))


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  dtype=None, mask=None, engine=engine.unknown, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.tensor_scalar(dst, _t(d) if x is None else x, op0, _t(operand0), reverse0, op1,
                           _t(operand1), reverse1, engine=engine)

    return _result("tensor_scalar", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.scalar_tensor_tensor(dst, _t(d) if x is None else x, op0, _t(operand0), op1, _t(operand1),
                                  reverse0, reverse1)

    return _result("scalar_tensor_tensor", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def tensor_copy(src, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    s = materialize(src)

    def emit(dst, accumulate, x=None):
        _isa.tensor_copy(dst, _t(s) if x is None else x, engine=engine)

    return _result("tensor_copy", s.shape, _dt(dtype, s.dtype), sbuf, emit, mask, (s,))


def reciprocal(data, dtype=None, mask=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.reciprocal(dst, _t(d) if x is None else x)

    return _result("reciprocal", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def _reduced(d, axis, keepdims: bool) -> tuple:
    axes = reduce_axes("tensor_reduce", _t(d), axis)
    shape = tuple(1 if i in axes else n for i, n in enumerate(d.shape) if keepdims or i not in axes)
    return shape if len(shape) > 1 else shape + (1,)  # all free dims reduced: a [P, 1] column


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.tensor_reduce(dst, op, _t(d) if x is None else x, axis, negate=negate, keepdims=keepdims)

    return _result("tensor_reduce", _reduced(d, axis, keepdims), _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None,
                         mask=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.tensor_scalar_reduce(dst, _t(d) if x is None else x, op0, _t(operand0), reduce_op,
                                  _t(reduce_res), reverse0)

    return _result("tensor_scalar_reduce", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None,
                       mask=None, **kwargs):
    a, b = materialize(data0), materialize(data1)

    def emit(dst, accumulate, x=None, y=None):
        _isa.tensor_tensor_scan(dst, _t(a) if x is None else x, _t(b) if y is None else y, _t(initial),
                                op0, op1, reverse0, reverse1)

    return _result("tensor_tensor_scan", a.shape, _dt(dtype, a.dtype), sbuf, emit, mask, (a, b))


def memset(shape, value, dtype, mask=None, engine=engine.unknown, **kwargs):
    shape = tuple(int(n) for n in shape)

    def emit(dst, accumulate):
        _isa.memset(dst, value, engine=engine)

    return _result("memset", shape, dtype, sbuf, emit, mask, ())


def tensor_partition_reduce(op, data, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.tensor_partition_reduce(dst, op, _t(d) if x is None else x)

    return _result("tensor_partition_reduce", (1,) + tuple(d.shape[1:]), _dt(dtype, d.dtype), sbuf, emit,
                   mask, (d,))


def dropout(data, prob, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.dropout(dst, _t(d) if x is None else x, _t(prob))

    return _result("dropout", d.shape, _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def bn_stats(data, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.bn_stats(dst, _t(d) if x is None else x)

    return _result("bn_stats", (d.shape[0], 6 * math.ceil(_free(d) / 512)), _dt(dtype, d.dtype), sbuf, emit,
                   mask, (d,))


def bn_aggr(data, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.bn_aggr(dst, _t(d) if x is None else x)

    return _result("bn_aggr", (d.shape[0], 2), _dt(dtype, d.dtype), sbuf, emit, mask, (d,))


def max8(src, mask=None, dtype=None, **kwargs):
    s = materialize(src)

    def emit(dst, accumulate, x=None):
        _isa.max8(dst, _t(s) if x is None else x)

    return _result("max8", (s.shape[0], 8), _dt(dtype, s.dtype), sbuf, emit, mask, (s,))


def nc_find_index8(data, vals, mask=None, dtype=None, **kwargs):
    d = materialize(data)

    def emit(dst, accumulate, x=None):
        _isa.nc_find_index8(dst, _t(d) if x is None else x, _t(vals))

    from neuronsim.nki.language.dtypes import uint32

    return _result("nc_find_index8", (d.shape[0], 8), _dt(dtype, uint32), sbuf, emit, mask, (d,))


# ------------------------------------------------------------------ GpSimd: index expressions


def _affine(expr, fn: str, shape) -> tuple[list, int, int]:
    """An index expression as iota's (pattern, offset, channel_multiplier) over ``shape``."""
    e = IndexExpr.of(expr)
    nd = len(shape)
    coefs = [0] * nd
    for c, a in e.terms.values():
        coefs[nd + a] += c
    pattern = [[coefs[j], shape[j]] for j in range(1, nd)] or [[0, 1]]
    return pattern, e.const, coefs[0] if nd else 0


def iota(expr, dtype, mask=None, **kwargs):
    """The values of an index expression (``nl.arange``/``nl.mgrid``) in a new tile (GpSimd)."""
    hints.hint("nisa.iota(expr)")
    e = IndexExpr.of(expr)
    shape = e.shape if len(e.shape) >= 2 else (1,) * (2 - len(e.shape)) + e.shape
    pattern, offset, cm = _affine(e, "iota", shape)

    def emit(dst, accumulate):
        _isa.iota(dst, pattern, offset=offset, channel_multiplier=cm)

    return _result("iota", shape, dtype, sbuf, emit, mask, ())


_CMP = {"<": AluOp.less, "<=": AluOp.less_equal, ">": AluOp.greater, ">=": AluOp.greater_equal,
        "==": AluOp.equal, "!=": AluOp.not_equal}


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **kwargs):
    """``on_true_tile`` where the affine predicate holds, else ``on_false_value`` (GpSimd)."""
    hints.hint("nisa.affine_select(pred)")
    t = materialize(on_true_tile)
    if not isinstance(pred, Mask) or len(pred.atoms) != 1:
        raise UnsupportedError(
            "nisa.affine_select takes one comparison of an affine index expression with 0 "
            "(e.g. i_q - i_k >= 0)", location=caller_location(),
        )
    expr, op = pred.atoms[0]
    shape = tuple(_t(t).shape)
    pattern, offset, cm = _affine(expr, "affine_select", shape)

    def emit(dst, accumulate, x=None):
        # GpSimd reads SBUF only: a PSUM tile is copied out first, as the NKI compiler does for
        # operands an engine cannot read (nl.store does the same)
        src = _lt.sbuf_operand(_t(t) if x is None else x, "affine_select.psum_copy")
        _isa.affine_select(dst, pattern, cm, src, on_false_value, cmp_op=_CMP[op], offset=offset)

    return _result("affine_select", shape, _dt(dtype, _t(t).dtype), sbuf, emit, mask, (t,))


# ------------------------------------------------------------------ DMA (dst already explicit in NKI 0.1)


def dma_copy(dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             **kwargs):
    if dst_rmw_op is not None:
        raise UnsupportedError("nisa.dma_copy(dst_rmw_op=) is not simulated", location=caller_location())
    return run(lambda d, s: _isa.dma_copy(d, s, oob_mode=oob_mode, dge_mode=dge_mode), (dst, src), {}, mask)


def dma_transpose(src, axes=None, mask=None, dtype=None, **kwargs):
    s = materialize(src)
    shape = tuple(reversed(s.shape))

    def emit(dst, accumulate, x=None):
        _isa.dma_transpose(dst, _t(s) if x is None else x, axes=axes)

    return _result("dma_transpose", shape, _dt(dtype, s.dtype), sbuf, emit, mask, (s,))


def nc_stream_shuffle(src, dst, shuffle_mask, dtype=None, mask=None, **kwargs):
    """Cross-partition shuffle within 32-partition quadrants; ``dst`` is explicit in NKI 0.1 too."""
    return run(lambda d, s: _isa.nc_stream_shuffle(d, s, shuffle_mask), (dst, src), {}, mask)


def sequence_bounds(segment_ids, dtype=None, mask=None, **kwargs):
    """Each segment id's run start and end in a new [1, 2, n] tile (GpSimd); ``dtype`` defaults to the
    ids' (NKI 0.1)."""
    ids = materialize(segment_ids)
    shape = (1, 2, ids.free_size)

    def emit(dst, accumulate, x=None):
        _isa.sequence_bounds(dst, _t(ids) if x is None else x)

    return _result("sequence_bounds", shape, _dt(dtype, ids.dtype), sbuf, emit, mask, (ids,))


def _unsupported(name):
    def fn(*args, **kwargs):
        raise UnsupportedError(f"nisa.{name} (NKI 0.1) is not simulated", location=caller_location())

    fn.__name__ = name
    return fn


for _name in ("local_gather", "nc_match_replace8", "range_select", "select_reduce",
              "tensor_copy_dynamic_dst", "tensor_copy_dynamic_src",
              "tensor_copy_predicated", "builtin_custom_op"):
    globals()[_name] = _unsupported(_name)
