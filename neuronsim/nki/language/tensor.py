"""The tensors kernels hold (:class:`NkiTensor`), how an ``nl`` operation makes its result tile, and
Python's operators on tensors, which are ``nl``'s arithmetic (``a + b`` is ``nl.add(a, b)``).

An NkiTensor is a :class:`~neuronsim.nki.tensor.TensorView` (indexing, ``.ap()``, ``reshape``...)
with the operators: ``+ - * / **``, comparisons, ``& | ^``, unary ``-`` and ``t[...] = value``.
Every ``nl`` creation call and operation returns one, and views of it are NkiTensors too.
"""

from __future__ import annotations

import builtins
import threading

import numpy as np

from neuronsim.errors import ConstraintError, DtypeError, UnsupportedError
from neuronsim.nki import isa as _isa
from neuronsim.nki.language.dtypes import DTYPE_MEMO, bool_, private_hbm, psum, sbuf, shared_hbm
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import MemoryRegion, NkiDtype, mx_name, region_of, to_sim_dtype
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AluOp, Memory

# ---------------------------------------------------------------- tiles made by operations


def sim_dtype(dtype) -> DType:
    """The simulator dtype of an ``nl`` dtype argument (an MX type: its storage word)."""
    try:
        return to_sim_dtype(dtype)
    except DtypeError as exc:
        raise DtypeError(exc.what, location=caller_location()) from None


def _shape(shape) -> tuple[int, ...]:
    if type(shape) is tuple and builtins.all(type(s) is int for s in shape):
        return shape
    if isinstance(shape, int):
        return (int(shape),)
    return tuple(int(s) for s in shape)


_REGION = {None: sbuf, sbuf: sbuf, psum: psum, private_hbm: private_hbm, shared_hbm: shared_hbm}


def alloc(shape, dtype, buffer=None, name: str = "", address=None, tag: str = "") -> NkiTensor:
    """A new whole tensor in ``buffer`` (on-chip tiles are checked against the chip's limits)."""
    trace = current_trace()
    region = _REGION.get(buffer) if type(buffer) is MemoryRegion or buffer is None else region_of(buffer)
    if region is None:
        region = region_of(buffer)
    if type(shape) is not tuple or not builtins.all(type(n) is int for n in shape):
        shape = _shape(shape)
    d = DTYPE_MEMO.get(dtype) if type(dtype) is NkiDtype else None
    mx = None
    if d is None:
        d = sim_dtype(dtype)
        mx = mx_name(dtype)
    location = caller_location()
    memory = region.memory
    if memory is not Memory.HBM:
        buf = trace.new_tile(name or tag or "tensor", memory, shape, d, location, tag)
        if address is not None:
            buf.address = (int(address[0]), int(address[1]))
            buf.pinned = True
    else:
        buf = trace.new_buffer(
            name or ("shared" if region.shared else "hbm"),
            Memory.HBM,
            shape,
            d,
            location,
            kind="scratch",
            shared=region.shared,
        )
    buf.mx = mx
    return NkiTensor.whole(buf)


class _ResultHook(threading.local):
    hook = None  # the legacy API's mask=: results carved out of full-size tiles (legacy/grid.py)


result_hook = _ResultHook()


def new_tile(shape, dtype, tag: str, buffer=sbuf) -> NkiTensor:
    """The result tile of an ``nl`` operation (SBUF unless ``buffer``), named after the operation."""
    hook = result_hook.hook
    if hook is not None:
        return hook(shape, dtype, tag, buffer)
    return alloc(shape, dtype, buffer, tag=tag)


def is_tile(x) -> bool:
    return isinstance(x, TensorView)


def result_dtype(*xs) -> DType:
    ds_ = [x.buf.dtype for x in xs if is_tile(x)]
    if builtins.any(d is DType.float32 for d in ds_):
        return DType.float32
    floats = [d for d in ds_ if d.is_float]
    return floats[0] if floats else ds_[0]


def sbuf_operand(x: TensorView, tag: str) -> TensorView:
    """``x`` itself, or an SBUF copy of it when it lives in PSUM and must not."""
    if x.memory is not Memory.PSUM:
        return x
    tmp = new_tile(x.shape, x.dtype, tag)
    _isa.tensor_copy(tmp, x)
    return tmp


def _ones_row(partitions: int, dtype: DType) -> TensorView:
    """A [1, partitions] SBUF tile of ones (made once per trace), TensorE's broadcast stationary."""
    trace = current_trace()
    key = ("ones_row", partitions, dtype)
    hit = trace.identity.get(key)
    if hit is None:
        hit = trace.identity[key] = new_tile((1, partitions), dtype, "broadcast.ones")
        _isa.memset(hit, 1.0)
    return hit


def partition_broadcast(x: TensorView, partitions: int, tag: str) -> NkiTensor:
    """A new SBUF tile holding the one partition of ``x`` on each of ``partitions`` partitions.

    Broadcasting across partitions moves data between partitions, which no ALU access pattern can
    do. Float data goes through TensorE as AWS's kernels do it (nki-library's rmsnorm_quant: a
    [1, P] ones stationary times the [1, F] row gives the row on every PSUM partition; a K=1
    matmul is exact), 512 columns per PSUM bank, then back to SBUF; integer data (TensorE
    multiplies floats) goes out to an HBM scratch row and comes back by a DMA reading it
    ``partitions`` times (DMA descriptors may repeat a source row; on-chip access patterns may not).
    """
    out = new_tile((partitions, *x.shape[1:]), x.dtype, tag)
    row = x.reshape((1, x.free_size)) if len(x.shape) != 2 else x
    flat = out.reshape((partitions, x.free_size)) if len(x.shape) != 2 else out
    if not x.buf.dtype.is_float:
        scratch = alloc((1, x.free_size), x.dtype, private_hbm, tag=f"{tag}.hbm")
        _isa.dma_copy(scratch, sbuf_operand(row, f"{tag}.psum_copy"))
        _isa.dma_copy(flat, scratch.broadcast(0, partitions))
        return out
    src = sbuf_operand(row, f"{tag}.psum_copy")
    ones = _ones_row(partitions, src.buf.dtype)  # TensorE pairs operands of one float kind
    chunk = 512  # fp32 elements of one PSUM bank per partition
    for start in range(0, x.free_size, chunk):
        n = min(chunk, x.free_size - start)
        acc = new_tile((partitions, n), DType.float32, f"{tag}.psum", buffer=psum)
        _isa.nc_matmul(acc, ones, src[:, start:start + n])
        _isa.tensor_copy(flat[:, start:start + n], acc)
    return out


# ---------------------------------------------------------------- arithmetic behind the operators

_PY_BINARY = {
    AluOp.add: lambda a, b: a + b,
    AluOp.subtract: lambda a, b: a - b,
    AluOp.multiply: lambda a, b: a * b,
    AluOp.divide: lambda a, b: a / b,
    AluOp.maximum: max,
    AluOp.minimum: min,
    AluOp.power: lambda a, b: a**b,
}


def binary(x, y, op: AluOp, dtype, tag: str):
    """``nl.<tag>(x, y)``: tile op tile (broadcast along the free dims), tile op scalar, or two
    constants computed in Python. A new SBUF tile, on VectorE."""
    if hasattr(type(y), "nki_materialize"):  # a legacy nisa result used as an operand
        y = y.nki_materialize()
    if hasattr(type(x), "nki_materialize"):
        x = x.nki_materialize()
    xt, yt = is_tile(x), is_tile(y)
    if not xt and not yt:
        fn = _PY_BINARY.get(op)
        if fn is None:
            raise UnsupportedError(f"nl.{tag} of two constants", location=caller_location())
        return fn(x, y)
    d = sim_dtype(dtype) if dtype is not None else result_dtype(x, y)
    if xt and not yt:
        out = new_tile(x.shape, d, tag)
        _isa.tensor_scalar(out, x, op, float(y))
        return out
    if yt and not xt:
        out = new_tile(y.shape, d, tag)
        _isa.tensor_scalar(out, y, op, float(x), reverse0=True)
        return out
    if x.partitions != y.partitions and 1 in (x.partitions, y.partitions):
        if x.partitions == 1:
            x = partition_broadcast(x, y.partitions, f"{tag}.broadcast")
        else:
            y = partition_broadcast(y, x.partitions, f"{tag}.broadcast")
    if x.partitions != y.partitions:
        raise ConstraintError(
            f"nl.{tag}: operands have {x.partitions} and {y.partitions} partitions; only a "
            f"1-partition operand broadcasts across partitions",
            location=caller_location(),
        )
    if x.shape == y.shape:
        if x.memory is Memory.PSUM and y.memory is Memory.PSUM:
            y = sbuf_operand(y, f"{tag}.psum_copy")
        out = new_tile(x.shape, d, tag)
        _isa.tensor_tensor(out, x, y, op)
        return out
    if y.free_size == 1:
        out = new_tile(x.shape, d, tag)
        _isa.tensor_scalar(out, x, op, y)
        return out
    if x.free_size == 1:
        out = new_tile(y.shape, d, tag)
        _isa.tensor_scalar(out, y, op, x, reverse0=True)
        return out
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ConstraintError(f"nl.{tag}: operand shapes {x.shape} and {y.shape} do not broadcast (each "
                              f"free dim equal or 1)", location=caller_location()) from None
    out = new_tile(shape, d, tag)
    _isa.tensor_tensor(out, x.broadcast_to(shape), y.broadcast_to(shape), op)
    return out


def unary_alu(x, op: AluOp, dtype, tag: str, operand=0.0):
    """``x op operand`` into a new SBUF tile (VectorE)."""
    out = new_tile(x.shape, x.dtype if dtype is None else dtype, tag)
    _isa.tensor_scalar(out, x, op, operand)
    return out


def same_view(a, b) -> bool:
    return (
        isinstance(a, TensorView)
        and a.buf is b.buf
        and a.offset == b.offset
        and a.dims == b.dims
        and a.ppair == b.ppair
    )


def assign(dst: TensorView, value) -> None:
    """``dst[...] = value``: a copy (DMA when HBM is involved) or a memset for a constant."""
    if type(dst) is not NkiTensor and hasattr(type(dst), "nki_assign"):  # legacy grid view
        dst.nki_assign(value)
        return
    if hasattr(type(value), "nki_assign_into"):  # a legacy nisa result: computed into dst
        value.nki_assign_into(dst)
        return
    if same_view(value, dst):  # t[k] += x already wrote t[k] in place
        return
    if not is_tile(value):
        if dst.on_chip:
            _isa.memset(dst, value)
            return
        raise UnsupportedError(
            "assigning a constant to an HBM tensor is not simulated; store a tile", location=caller_location()
        )
    if not dst.on_chip or not value.on_chip:
        _isa.dma_copy(dst, sbuf_operand(value, "assign.psum_copy"))
    else:
        _isa.tensor_copy(dst, value)


# ---------------------------------------------------------------- the tensor


def _operator(name: str, op: AluOp, dtype=None, swap: bool = False):
    """The method behind a Python operator: ``nl.<name>(self, other)`` (``(other, self)`` if ``swap``)."""
    if swap:
        def method(self, other):
            return binary(other, self, op, dtype, name)
    else:
        def method(self, other):
            return binary(self, other, op, dtype, name)
    method.__name__ = method.__qualname__ = f"NkiTensor.{name}"
    return method


class NkiTensor(TensorView):
    """A tensor in a traced kernel: a view of a buffer with Python's operators as ``nl`` operations."""

    __slots__ = ()
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __setitem__(self, key, value) -> None:
        assign(self[key], value)

    __add__ = _operator("add", AluOp.add)
    __radd__ = _operator("add", AluOp.add, swap=True)
    __sub__ = _operator("subtract", AluOp.subtract)
    __rsub__ = _operator("subtract", AluOp.subtract, swap=True)
    __mul__ = _operator("multiply", AluOp.multiply)
    __rmul__ = _operator("multiply", AluOp.multiply, swap=True)
    __truediv__ = _operator("divide", AluOp.divide)
    __rtruediv__ = _operator("divide", AluOp.divide, swap=True)
    __pow__ = _operator("power", AluOp.power)
    __lt__ = _operator("less", AluOp.less, bool_)
    __le__ = _operator("less_equal", AluOp.less_equal, bool_)
    __gt__ = _operator("greater", AluOp.greater, bool_)
    __ge__ = _operator("greater_equal", AluOp.greater_equal, bool_)
    __and__ = _operator("bitwise_and", AluOp.bitwise_and)
    __or__ = _operator("bitwise_or", AluOp.bitwise_or)
    __xor__ = _operator("bitwise_xor", AluOp.bitwise_xor)

    def __iadd__(self, other):
        if hasattr(type(other), "nki_accumulate_into"):  # legacy: psum[...] += nisa.nc_matmul(...)
            other.nki_accumulate_into(self)
            return self
        return binary(self, other, AluOp.add, None, "add")

    def __neg__(self):
        return unary_alu(self, AluOp.multiply, None, "negative", -1.0)

    __hash__ = object.__hash__
