"""``nki.language``: tensors, buffers, loops, dtypes, tile sizes and the convenience operations.

Creation (``ndarray``, ``zeros``, ``full``...) makes a tracer tensor; ``load``/``store`` are DMA
copies; the math operations make a new SBUF tile and record the ``nisa`` instruction(s) that
compute it, on the engine the NKI compiler uses for them (activation functions on ScalarE,
arithmetic on VectorE, ``matmul``/``transpose`` on TensorE). Operations with no instruction in
the simulated ISA raise :class:`~neuronsim.errors.UnsupportedError` naming the kernel line.
"""

from __future__ import annotations

import builtins
import contextlib
import math

import numpy as np

from neuronsim.errors import (
    ConstraintError,
    DtypeError,
    PsumCapacityError,
    SbufCapacityError,
    UnsupportedError,
)
from neuronsim.nki import isa as _isa
from neuronsim.nki import types as _types
from neuronsim.nki.allocate import SBUF_ALIGN_BYTES
from neuronsim.nki.isa.vector import _reduce_axes
from neuronsim.nki.tracing import NkiTensor, active_trace, caller_location, current_trace, loop
from neuronsim.nki.types import DynSlice, MemoryRegion, NkiDtype, region_of, to_sim_dtype
from neuronsim.options import current as current_options
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ActFunc, AluOp, Memory

NkiTensor = NkiTensor
ndarray_type = NkiTensor

# ---------------------------------------------------------------- dtypes and buffers

_D = _types.DTYPES
bool_ = _D[DType.bool_]
int8, int16, int32 = _D[DType.int8], _D[DType.int16], _D[DType.int32]
uint8, uint16, uint32 = _D[DType.uint8], _D[DType.uint16], _D[DType.uint32]
float16, float32 = _D[DType.float16], _D[DType.float32]
bfloat16, tfloat32 = _D[DType.bfloat16], _D[DType.tfloat32]
float8_e4m3, float8_e5m2 = _D[DType.float8_e4m3], _D[DType.float8_e5m2]
float8_e4m3fn = _D[DType.float8_e4m3fn]
_DTYPE_MEMO = {nd: d for d, nd in _D.items()}  # keyed by the canonical objects: identity hits
# The x4-packed MX types exist in the API; the simulator stores no packed formats (using one is a DtypeError).
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"


class fp32:
    """float32 limits (``nl.fp32.min`` is the most negative finite float32)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)
    eps = float(np.finfo(np.float32).eps)


sbuf, psum, hbm, private_hbm, shared_hbm = (
    _types.sbuf,
    _types.psum,
    _types.hbm,
    _types.private_hbm,
    _types.shared_hbm,
)
MemoryRegion = MemoryRegion
ds = DynSlice


class NKIObject:
    """Base class of user classes passed to kernels (plain Python objects here)."""


# ---------------------------------------------------------------- tile sizes


def _chip():
    trace = active_trace()
    return trace.chip if trace is not None else get_chip(current_options().chip)


class _TileSizeMeta(type):
    pmax = property(lambda cls: _chip().partitions)
    psum_bank_fmax = property(lambda cls: _chip().psum_bank_bytes_per_partition // 4)
    psum_fmax = psum_bank_fmax  # deprecated alias (0.4): one bank of fp32
    psum_bank_fmax_bytes = property(lambda cls: _chip().psum_bank_bytes_per_partition)
    psum_fmax_bytes = psum_bank_fmax_bytes
    psum_num_banks = property(lambda cls: _chip().psum_banks)
    sbuf_size_bytes = property(lambda cls: _chip().partitions * _chip().sbuf_bytes_per_partition)
    sbuf_fmax = property(lambda cls: _chip().sbuf_bytes_per_partition // 4)
    sbuf_fmax_bytes = property(lambda cls: _chip().sbuf_bytes_per_partition)
    total_available_sbuf_size = property(lambda cls: _chip().sbuf_bytes_per_partition)
    gemm_stationary_fmax = property(lambda cls: _chip().matmul_stationary_free_max)
    # The portable moving tile is one PSUM bank of fp32 (trn3's nc_matmul accepts up to 8 banks).
    gemm_moving_fmax = property(
        lambda cls: builtins.min(_chip().matmul_moving_free_max, _chip().psum_bank_bytes_per_partition // 4)
    )
    bn_stats_fmax = property(lambda cls: _chip().bn_stats_free_max)
    psum_min_align = property(lambda cls: _chip().psum_bank_bytes_per_partition)
    sbuf_min_align = property(lambda cls: SBUF_ALIGN_BYTES)


class tile_size(metaclass=_TileSizeMeta):
    """Hardware tile size constants of the chip being traced for (``nl.tile_size.pmax`` ...)."""


# ---------------------------------------------------------------- SPMD


def program_id(axis=0) -> int:
    """Index of this SPMD instance along ``axis`` of the launch grid."""
    return current_trace().program_id[int(axis)]


def num_programs(axes=None) -> int:
    grid = current_trace().grid
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, int):
        return grid[axes]
    return math.prod(grid[a] for a in axes)


def program_ndim() -> int:
    return len(current_trace().grid)


# ---------------------------------------------------------------- loops


def affine_range(start, stop=None, step=1):
    """Loop iterations with no carried dependency: unrolled, and their tiles get rotating buffers."""
    return loop("affine", start, stop, step)


def sequential_range(start, stop=None, step=1):
    """Loop with a carried dependency: unrolled, iterations share buffers as liveness allows."""
    return loop("sequential", start, stop, step)


def static_range(start, stop=None, step=1):
    """Fully unrolled loop."""
    return loop("static", start, stop, step)


dynamic_range = sequential_range  # deprecated in 0.6; static bounds unroll to the same program


def fori_loop(lower, upper, body_fun, init_val):
    val = init_val
    for i in sequential_range(lower, upper):
        val = body_fun(i, val)
    return val


def while_loop(cond_fun, body_fun, init_val):
    val = init_val
    while cond_fun(val):
        val = body_fun(val)
    return val


@contextlib.contextmanager
def no_reorder():
    """Program order is kept by construction here (each engine issues its stream in order)."""
    yield


# ---------------------------------------------------------------- creation


def _check_on_chip(chip, shape, dtype, memory: Memory, name: str, location) -> None:
    per_partition = dtype.itemsize
    for n in shape[1:]:
        per_partition *= n
    if (
        len(shape) >= 2
        and 1 <= shape[0] <= chip.partitions
        and per_partition
        <= (chip.sbuf_bytes_per_partition if memory is Memory.SBUF else chip.psum_bytes_per_partition)
    ):
        return
    what = f"{memory.name} tile '{name}' {list(shape)} {_types.DTYPES[dtype]}"
    where = {"instruction": f"allocation of '{name}'", "location": location}
    if len(shape) < 2:
        raise ConstraintError(f"{what} must be at least 2-D with the partition dimension first", **where)
    if shape[0] > chip.partitions or shape[0] < 1:
        raise ConstraintError(
            f"{what} has {shape[0]} partitions; the limit is {chip.partitions} (nl.tile_size.pmax)", **where
        )
    if memory is Memory.SBUF:
        raise SbufCapacityError(
            f"{what} needs {per_partition} bytes per partition; an SBUF partition has "
            f"{chip.sbuf_bytes_per_partition} usable bytes on {chip.name}",
            **where,
        )
    raise PsumCapacityError(
        f"{what} needs {per_partition} bytes per partition; PSUM has {chip.psum_banks} banks "
        f"of {chip.psum_bank_bytes_per_partition} bytes ({chip.psum_bytes_per_partition} "
        f"bytes per partition)",
        **where,
    )


def _dtype(dtype) -> DType:
    if isinstance(dtype, str) and dtype.endswith("_x4"):
        raise DtypeError(f"{dtype} (x4-packed MX data) is not simulated", location=caller_location())
    return to_sim_dtype(dtype)


def _shape(shape) -> tuple[int, ...]:
    if type(shape) is tuple and builtins.all(type(s) is int for s in shape):
        return shape
    if isinstance(shape, int):
        return (int(shape),)
    return tuple(int(s) for s in shape)


_REGION = {None: sbuf, sbuf: sbuf, psum: psum, private_hbm: private_hbm, shared_hbm: shared_hbm}


def _alloc(shape, dtype, buffer=None, name: str = "", address=None, tag: str = "") -> NkiTensor:
    trace = current_trace()
    region = _REGION.get(buffer) if type(buffer) is MemoryRegion or buffer is None else region_of(buffer)
    if region is None:
        region = region_of(buffer)
    if type(shape) is not tuple or not builtins.all(type(n) is int for n in shape):
        shape = _shape(shape)
    d = _DTYPE_MEMO.get(dtype) if type(dtype) is NkiDtype else None
    if d is None:
        d = _dtype(dtype)
    location = caller_location()
    memory = region.memory
    if memory is not Memory.HBM:
        label = name or tag or "tensor"
        _check_on_chip(trace.chip, shape, d, memory, label, location)
        buf = trace.new_tile(label, memory, shape, d, location, tag)
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
    return NkiTensor.whole(buf)


def ndarray(shape, dtype, buffer=None, name="", address=None) -> NkiTensor:
    """A new, uninitialized tensor of ``shape`` and ``dtype`` in ``buffer`` (default ``nl.sbuf``)."""
    return _alloc(shape, dtype, buffer, name, address)


def full(shape, fill_value, dtype, buffer=None, name="") -> NkiTensor:
    """A new tensor filled with ``fill_value`` (memset on VectorE; HBM tensors are filled by the host)."""
    t = _alloc(shape, dtype, buffer, name, tag="full")
    if t.on_chip:
        _isa.memset(t, fill_value)
    else:
        current_trace().hbm_fill[t.buf.id] = float(fill_value)
    return t


def zeros(shape, dtype, buffer=None, name="") -> NkiTensor:
    return full(shape, 0.0, dtype, buffer, name)


def ones(shape, dtype, buffer=None, name="") -> NkiTensor:
    return full(shape, 1.0, dtype, buffer, name)


def empty_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return ndarray(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def zeros_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return zeros(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def ones_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return ones(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def shared_identity_matrix(n, dtype="uint8") -> NkiTensor:
    """An ``n x n`` identity in SBUF (built once per kernel and dtype: memset + affine_select on GpSimd)."""
    trace = current_trace()
    key = (int(n), to_sim_dtype(dtype))
    hit = trace.identity.get(key)
    if hit is not None:
        return hit
    ones_tile = _alloc((n, n), dtype, sbuf, tag="identity.ones")
    _isa.memset(ones_tile, 1.0, engine=_isa.engine.gpsimd)
    eye = _alloc((n, n), dtype, sbuf, name="identity", tag="identity")
    # value(p, f) = p - f; keep the ones where it is 0 (the diagonal)
    _isa.affine_select(eye, [[-1, n]], 1, ones_tile, 0.0, cmp_op=AluOp.equal)
    trace.identity[key] = eye
    return eye


def shared_constant(constant, dtype=None) -> NkiTensor:
    """An HBM tensor holding ``constant`` (a numpy array), bound as an input when the kernel runs."""
    arr = np.asarray(constant)
    d = to_sim_dtype(arr.dtype if dtype is None else dtype)
    trace = current_trace()
    t = _alloc(arr.shape, d, shared_hbm, name="constant")
    t.buf.kind = "input"
    trace.constants[t.buf.id] = np.ascontiguousarray(arr.astype(_types.numpy_dtype(d)))
    return t


# ---------------------------------------------------------------- tiles made by operations


def _new_tile(shape, dtype, tag: str, buffer=sbuf) -> NkiTensor:
    return _alloc(shape, dtype, buffer, tag=tag)


def _is_tile(x) -> bool:
    return isinstance(x, NkiTensor)


def _result_dtype(*xs) -> DType:
    ds_ = [x.buf.dtype for x in xs if _is_tile(x)]
    if builtins.any(d is DType.float32 for d in ds_):
        return DType.float32
    floats = [d for d in ds_ if d.is_float]
    return floats[0] if floats else ds_[0]


def _sbuf_operand(x: NkiTensor, tag: str) -> NkiTensor:
    """``x`` itself, or an SBUF copy of it when it lives in PSUM and must not."""
    if x.memory is not Memory.PSUM:
        return x
    tmp = _new_tile(x.shape, x.dtype, tag)
    _isa.tensor_copy(tmp, x)
    return tmp


# ---------------------------------------------------------------- data movement


def load(src, dtype=None) -> NkiTensor:
    """Load an HBM tensor into a new SBUF tile (one DMA; casts through fp32 if ``dtype`` differs)."""
    if len(src.shape) < 2:
        raise ConstraintError(
            f"nl.load: src has shape {src.shape}; an SBUF tile needs a partition dimension "
            f"first (reshape it to (P, F))",
            location=caller_location(),
        )
    out = _new_tile(src.shape, src.dtype if dtype is None else dtype, "load")
    _isa.dma_copy(out, src)
    return out


def store(dst, value) -> None:
    """Store an SBUF tile into HBM (a PSUM tile is first copied to SBUF, as the NKI compiler does)."""
    if _is_tile(value):
        value = _sbuf_operand(value, "store.psum_copy")
    _isa.dma_copy(dst, value)


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """Load HBM ``src`` [A, B] transposed into a new SBUF tile [B, A] (DMA transpose)."""
    a, b = src.shape
    out = _new_tile((b, a), src.dtype if dtype is None else dtype, "load_transpose2d")
    _isa.dma_transpose(out, src)
    return out


def copy(x, dtype=None) -> NkiTensor:
    """A copy of ``x`` in a new SBUF tile (VectorE)."""
    out = _new_tile(x.shape, x.dtype if dtype is None else dtype, "copy")
    _isa.tensor_copy(out, x)
    return out


def assign(dst: NkiTensor, value) -> None:
    """``dst[...] = value``: a copy (DMA when HBM is involved) or a memset for a constant."""
    if not _is_tile(value):
        if dst.on_chip:
            _isa.memset(dst, value)
            return
        raise UnsupportedError(
            "assigning a constant to an HBM tensor is not simulated; store a tile", location=caller_location()
        )
    if not dst.on_chip or not value.on_chip:
        _isa.dma_copy(dst, _sbuf_operand(value, "assign.psum_copy"))
    else:
        _isa.tensor_copy(dst, value)


def transpose(x, dtype=None) -> NkiTensor:
    """``x`` [P, F] transposed into a new SBUF tile [F, P]: VectorE up to 32x32, else TensorE via PSUM."""
    p, f = x.partitions, x.free_size
    d = x.dtype if dtype is None else dtype
    small = current_trace().chip.vector_transpose_max_dim
    if p <= small and f <= small:
        out = _new_tile((f, p), x.dtype, "transpose")
        _isa.nc_transpose(out, x, engine=_isa.engine.vector)
        return out if dtype is None else copy(out, d)
    src = _sbuf_operand(x, "transpose.psum_copy")
    t_psum = _new_tile((f, p), x.dtype, "transpose.psum", psum)
    _isa.nc_transpose(t_psum, src, engine=_isa.engine.tensor)
    out = _new_tile((f, p), d, "transpose")
    _isa.tensor_copy(out, t_psum)
    return out


def matmul(x, y, transpose_x=False) -> NkiTensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x``) into a new PSUM tile (fp32), on TensorE.

    Without ``transpose_x`` the compiler inserts a transpose of ``x`` first, as NKI does.
    """
    xt = x if transpose_x else transpose(x)
    xt, y = _sbuf_operand(xt, "matmul.x"), _sbuf_operand(y, "matmul.y")
    out = _new_tile((xt.free_size, y.free_size), float32, "matmul", psum)
    _isa.nc_matmul(out, xt, y)
    return out


# ---------------------------------------------------------------- element-wise math

_PY_BINARY = {
    AluOp.add: lambda a, b: a + b,
    AluOp.subtract: lambda a, b: a - b,
    AluOp.multiply: lambda a, b: a * b,
    AluOp.divide: lambda a, b: a / b,
    AluOp.maximum: max,
    AluOp.minimum: min,
    AluOp.power: lambda a, b: a**b,
}


def _binary(x, y, op: AluOp, dtype, tag: str):
    xt, yt = _is_tile(x), _is_tile(y)
    if not xt and not yt:
        fn = _PY_BINARY.get(op)
        if fn is None:
            raise UnsupportedError(f"nl.{tag} of two constants", location=caller_location())
        return fn(x, y)
    d = _dtype(dtype) if dtype is not None else _result_dtype(x, y)
    if xt and not yt:
        out = _new_tile(x.shape, d, tag)
        _isa.tensor_scalar(out, x, op, float(y))
        return out
    if yt and not xt:
        out = _new_tile(y.shape, d, tag)
        _isa.tensor_scalar(out, y, op, float(x), reverse0=True)
        return out
    if x.partitions != y.partitions:
        raise ConstraintError(
            f"nl.{tag}: operands have {x.partitions} and {y.partitions} partitions; broadcasting "
            f"across partitions is not an on-chip access (broadcast the HBM view when loading)",
            location=caller_location(),
        )
    if x.shape == y.shape:
        if x.memory is Memory.PSUM and y.memory is Memory.PSUM:
            y = _sbuf_operand(y, f"{tag}.psum_copy")
        out = _new_tile(x.shape, d, tag)
        _isa.tensor_tensor(out, x, y, op)
        return out
    if y.free_size == 1:
        out = _new_tile(x.shape, d, tag)
        _isa.tensor_scalar(out, x, op, y)
        return out
    if x.free_size == 1:
        out = _new_tile(y.shape, d, tag)
        _isa.tensor_scalar(out, y, op, x, reverse0=True)
        return out
    shape = np.broadcast_shapes(x.shape, y.shape)
    out = _new_tile(shape, d, tag)
    _isa.tensor_tensor(out, x.broadcast_to(shape), y.broadcast_to(shape), op)
    return out


def _unary_act(x, func: ActFunc, dtype, tag: str):
    if not _is_tile(x):
        raise TypeError(f"nl.{tag} takes a tile, got {type(x).__name__}")
    out = _new_tile(x.shape, x.dtype if dtype is None else dtype, tag)
    _isa.activation(out, func, x)
    return out


def _unary_alu(x, op: AluOp, dtype, tag: str, operand=0.0):
    out = _new_tile(x.shape, x.dtype if dtype is None else dtype, tag)
    _isa.tensor_scalar(out, x, op, operand)
    return out


def _make_binary(name: str, op: AluOp, default_dtype=None):
    def fn(x, y, dtype=default_dtype):
        return _binary(x, y, op, dtype, name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{op.name}`` of two tiles, or a tile and a scalar (new SBUF tile; VectorE)."
    return fn


def _make_act(name: str, func: ActFunc):
    def fn(x, dtype=None):
        return _unary_act(x, func, dtype, name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{func.name}`` (new SBUF tile; ScalarE activation)."
    return fn


add = _make_binary("add", AluOp.add)
subtract = _make_binary("subtract", AluOp.subtract)
multiply = _make_binary("multiply", AluOp.multiply)
divide = _make_binary("divide", AluOp.divide)
maximum = _make_binary("maximum", AluOp.maximum)
minimum = _make_binary("minimum", AluOp.minimum)
power = _make_binary("power", AluOp.power)
abs_max = _make_binary("abs_max", AluOp.abs_max)
abs_min = _make_binary("abs_min", AluOp.abs_min)
fmod = _make_binary("fmod", AluOp.mod)
equal = _make_binary("equal", AluOp.equal, bool_)
not_equal = _make_binary("not_equal", AluOp.not_equal, bool_)
greater = _make_binary("greater", AluOp.greater, bool_)
greater_equal = _make_binary("greater_equal", AluOp.greater_equal, bool_)
less = _make_binary("less", AluOp.less, bool_)
less_equal = _make_binary("less_equal", AluOp.less_equal, bool_)
logical_and = _make_binary("logical_and", AluOp.logical_and, bool_)
logical_or = _make_binary("logical_or", AluOp.logical_or, bool_)
logical_xor = _make_binary("logical_xor", AluOp.logical_xor, bool_)
bitwise_and = _make_binary("bitwise_and", AluOp.bitwise_and)
bitwise_or = _make_binary("bitwise_or", AluOp.bitwise_or)
bitwise_xor = _make_binary("bitwise_xor", AluOp.bitwise_xor)
left_shift = _make_binary("left_shift", AluOp.left_shift)
right_shift = _make_binary("right_shift", AluOp.right_shift)

exp = _make_act("exp", ActFunc.exp)
log = _make_act("log", ActFunc.log)
tanh = _make_act("tanh", ActFunc.tanh)
sigmoid = _make_act("sigmoid", ActFunc.sigmoid)
relu = _make_act("relu", ActFunc.relu)
gelu = _make_act("gelu", ActFunc.gelu)
gelu_apprx_tanh = _make_act("gelu_apprx_tanh", ActFunc.gelu_apprx_tanh)
gelu_dx = _make_act("gelu_dx", ActFunc.gelu_dx)
silu = _make_act("silu", ActFunc.silu)
softplus = _make_act("softplus", ActFunc.softplus)
sqrt = _make_act("sqrt", ActFunc.sqrt)
rsqrt = _make_act("rsqrt", ActFunc.rsqrt)
reciprocal = _make_act("reciprocal", ActFunc.reciprocal)
square = _make_act("square", ActFunc.square)
erf = _make_act("erf", ActFunc.erf)
sin = _make_act("sin", ActFunc.sin)
abs = _make_act("abs", ActFunc.abs)
sign = _make_act("sign", ActFunc.sign)
identity = _make_act("identity", ActFunc.identity)


def negative(x, dtype=None):
    """``-x`` (new SBUF tile; VectorE)."""
    return _unary_alu(x, AluOp.multiply, dtype, "negative", -1.0)


def invert(x, dtype=None):
    """Bitwise NOT of an integer tile (VectorE)."""
    return _unary_alu(x, AluOp.invert, dtype, "invert")


bitwise_not = invert


def logical_not(x, dtype=bool_):
    return _unary_alu(x, AluOp.equal, dtype, "logical_not", 0.0)


def where(condition, x, y, dtype=None):
    """``x`` where ``condition`` else ``y`` (new SBUF tile; VectorE select)."""
    like = x if _is_tile(x) else y if _is_tile(y) else condition
    d = (
        _dtype(dtype)
        if dtype is not None
        else (
            _result_dtype(*(v for v in (x, y) if _is_tile(v)))
            if _is_tile(x) or _is_tile(y)
            else DType.float32
        )
    )
    on_true = x if _is_tile(x) else full(like.shape, float(x), d)
    out = _new_tile(like.shape, d, "where")
    _isa.select_reduce(out, condition, on_true, y)
    return out


def _unsupported(name: str):
    def fn(*args, **kwargs):
        raise UnsupportedError(
            f"nl.{name} is not simulated (no instruction of the simulated ISA computes it)",
            location=caller_location(),
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = "Not simulated: raises UnsupportedError."
    return fn


for _name in (
    "cos",
    "tan",
    "arctan",
    "ceil",
    "floor",
    "trunc",
    "gelu_apprx_sigmoid",
    "gelu_apprx_sigmoid_dx",
    "silu_dx",
    "erf_dx",
    "mish",
    "gather_flattened",
    "atomic_rmw",
    "all_reduce",
):
    globals()[_name] = _unsupported(_name)
del _name


# ---------------------------------------------------------------- random numbers (VectorE's PRNG)


def _no_mask(name: str, mask) -> None:
    if mask is not None:
        raise UnsupportedError(f"nl.{name}: mask= (predicated execution) is not simulated",
                               location=caller_location(3))


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the PRNG with a 32-bit value (a Python int, or a [1, 1] 32-bit tile): ``nisa.set_rng_seed``."""
    _no_mask("random_seed", mask)
    if not _is_tile(seed):
        seed = full((1, 1), int(seed) & 0xFFFFFFFF, DType.uint32, name="random_seed")
    _isa.set_rng_seed(seed)


def rand(shape, dtype=np.float32, **kwargs):
    """A tile of uniform values in [0, 1): ``nisa.rng`` bits, their top 24 (exact in fp32) times 2**-24."""
    _no_mask("rand", kwargs.get("mask"))
    bits = _new_tile(shape, DType.uint32, "rand.bits")
    _isa.rng(bits)
    _isa.tensor_scalar(bits, bits, AluOp.right_shift, 8)
    out = _new_tile(shape, dtype, "rand")
    _isa.tensor_scalar(out, bits, AluOp.multiply, 2.0**-24)
    return out


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """``x`` with each element zeroed with probability ``rate`` (a scalar or a [P, 1] tile), unscaled
    as documented: ``nisa.dropout``, then a cast if ``dtype`` differs from x's."""
    _no_mask("dropout", mask)
    out = _new_tile(x.shape, x.dtype, "dropout")
    _isa.dropout(out, x, rate)
    if dtype is None or _dtype(dtype) is x.buf.dtype:
        return out
    cast = _new_tile(x.shape, dtype, "dropout.cast")
    _isa.tensor_copy(cast, out)
    return cast


# ---------------------------------------------------------------- reductions and fused operations


def _reduced_shape(x: NkiTensor, axes, keepdims: bool) -> tuple[int, ...]:
    shape = (
        [1 if i in axes else n for i, n in enumerate(x.shape)]
        if keepdims
        else [n for i, n in enumerate(x.shape) if i not in axes]
    )
    if len(shape) < 2:
        shape.append(1)
    return tuple(shape)


def _reduce(x, op: AluOp, axis, dtype, keepdims: bool, tag: str, negate: bool = False) -> NkiTensor:
    axes = _reduce_axes(tag, x, axis)
    out = _new_tile(_reduced_shape(x, axes, keepdims), x.dtype if dtype is None else dtype, tag)
    _isa.tensor_reduce(out, op, x, axes, negate=negate)
    return out


def sum(x, axis, dtype=None, keepdims=False):
    """Sum along the trailing free ``axis`` dims (new SBUF tile; VectorE)."""
    return _reduce(x, AluOp.add, axis, dtype, keepdims, "sum")


def max(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.maximum, axis, dtype, keepdims, "max")


def min(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.minimum, axis, dtype, keepdims, "min")


def prod(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.multiply, axis, dtype, keepdims, "prod")


def all(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.minimum, axis, dtype, keepdims, "all")


def any(x, axis, dtype=None, keepdims=False):
    return _reduce(x, AluOp.maximum, axis, dtype, keepdims, "any")


def mean(x, axis, dtype=None, keepdims=False):
    """Mean along the trailing free ``axis`` dims (sum, then a scale; VectorE)."""
    out = _reduce(x, AluOp.add, axis, float32 if dtype is None else dtype, keepdims, "mean")
    n = x.size // (out.size or 1)
    _isa.tensor_scalar(out, out, AluOp.multiply, 1.0 / n)
    return out if dtype is not None or x.buf.dtype is DType.float32 else copy(out, x.dtype)


def _all_free(fn: str, x: NkiTensor, axis) -> None:
    axes = _reduce_axes(fn, x, axis)
    if axes[0] != 1:
        raise UnsupportedError(
            f"nl.{fn} over axis={axis} of {x.shape}: only reductions over all free dims are simulated",
            location=caller_location(),
        )


def softmax(x, axis=-1, dtype=None):
    """``exp(x - max) / sum(exp(x - max))`` along the free dims.

    Four instructions: max (VectorE, negated), exp with the -max bias and a running sum (ScalarE),
    reciprocal of the sum (VectorE) and the scale (VectorE).
    """
    _all_free("softmax", x, axis)
    p = x.partitions
    neg_max = _new_tile((p, 1), float32, "softmax.max")
    flat = x if len(x.shape) == 2 else x.flatten_dims(1, len(x.shape) - 1)
    _isa.tensor_reduce(neg_max, AluOp.maximum, flat, 1, negate=True)
    e = _new_tile(x.shape, float32, "softmax.exp")
    total = _new_tile((p, 1), float32, "softmax.sum")
    _isa.activation(
        e,
        ActFunc.exp,
        x,
        bias=neg_max,
        reduce_op=AluOp.add,
        reduce_res=total,
        reduce_cmd=_isa.reduce_cmd.reset_reduce,
    )
    _isa.reciprocal(total, total)
    out = _new_tile(x.shape, x.dtype if dtype is None else dtype, "softmax")
    _isa.tensor_scalar(out, e, AluOp.multiply, total)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    """``x / sqrt(mean(x^2) + epsilon) * w`` along the free dims (ScalarE, VectorE, ScalarE rsqrt)."""
    _all_free("rms_norm", x, axis)
    p = x.partitions
    sq = _new_tile(x.shape, float32, "rms_norm.square")
    total = _new_tile((p, 1), float32, "rms_norm.sum")
    _isa.activation(
        sq, ActFunc.square, x, reduce_op=AluOp.add, reduce_res=total, reduce_cmd=_isa.reduce_cmd.reset_reduce
    )
    _isa.tensor_scalar(total, total, AluOp.multiply, 1.0 / float(n), op1=AluOp.add, operand1=float(epsilon))
    _isa.activation(total, ActFunc.rsqrt, total)
    out = _new_tile(x.shape, x.dtype if dtype is None else dtype, "rms_norm")
    weight = w if w.shape == x.shape else w.broadcast_to(x.shape)
    _isa.scalar_tensor_tensor(out, x, AluOp.multiply, total, AluOp.multiply, weight)
    return out


# ---------------------------------------------------------------- debugging


def device_print(print_prefix, tensor) -> None:
    """Print ``tensor``'s value when the kernel runs (captured with a DMA into HBM at this point)."""
    trace = current_trace()
    src = _sbuf_operand(tensor, "device_print.psum_copy") if tensor.on_chip else tensor
    out = NkiTensor.whole(
        trace.new_buffer(
            f"__print{len(trace.prints)}",
            Memory.HBM,
            src.shape or (1,),
            src.buf.dtype,
            caller_location(),
            kind="output",
        )
    )
    _isa.dma_copy(out, src)
    trace.prints.append((str(print_prefix), out.buf))
