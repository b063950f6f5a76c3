"""``neuronxcc.nki.language``: NKI 0.1's ``nl`` on top of ``neuronsim.nki.language``.

Every current ``nl`` function is here, taking the legacy ``mask=`` and legacy operands (index-grid
views, deferred ``nisa`` results) through ``legacy/call.py``. Added: the index grids ``arange`` and
``mgrid``; ``par_dim`` (and block dimensions: a partition dimension after leading block dims is one
tile per block); ``spmd_dim``/``nc``; string buffer names and the allocator objects of
``neuronxcc.nki.compiler``; ``static_cast`` and ``loop_reduce``.
"""

from __future__ import annotations

import math

import numpy as np

from neuronsim.errors import UnsupportedError
from neuronsim.nki import language as _nl
from neuronsim.nki.language.dtypes import *  # noqa: F401,F403 (the dtypes and buffers, unchanged)
from neuronsim.nki.language.dtypes import hbm, private_hbm, psum, sbuf, shared_hbm
from neuronsim.nki.legacy import grid as _grid
from neuronsim.nki.legacy import hints
from neuronsim.nki.legacy.call import materialize, run
from neuronsim.nki.trace import caller_location
from neuronsim.nki.types import MemoryRegion

# pass-through: no tensors, no mask
program_id = _nl.program_id
num_programs = _nl.num_programs
program_ndim = _nl.program_ndim
tile_size = _nl.tile_size
ds = _nl.ds
device_print = _nl.device_print
NkiTensor = _nl.NkiTensor
fp32 = _nl.fp32


def _range(name: str, fn):
    """NKI 0.1's loop ranges take scheduling keywords (``directives=nki.compiler.no_reorder()``,
    ``precise_schedule=True``): they order the compiler's schedule, not the values; each engine
    here issues its instructions in program order already."""

    def legacy(*args, directives=None, precise_schedule=None, **kwargs):
        if directives is not None or precise_schedule is not None:
            hints.hint(f"nl.{name}(directives=/precise_schedule=)")
        return fn(*args, **kwargs)

    legacy.__name__ = legacy.__qualname__ = name
    legacy.__doc__ = fn.__doc__
    return legacy


affine_range = _range("affine_range", _nl.affine_range)
sequential_range = _range("sequential_range", _nl.sequential_range)
static_range = _range("static_range", _nl.static_range)


def _wrap(name: str, fn):
    def legacy(*args, mask=None, **kwargs):
        return run(fn, args, kwargs, mask)

    legacy.__name__ = legacy.__qualname__ = name
    legacy.__doc__ = fn.__doc__
    return legacy


_PASSED = set(globals())
for _name in _nl.__all__:
    _obj = getattr(_nl, _name)
    if _name not in _PASSED and callable(_obj) and not isinstance(_obj, type) and _name not in (
        "ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "arange", "mgrid",
    ):
        globals()[_name] = _wrap(_name, _obj)


def _trailing(fn):
    """A reduction over any free axes: the view permuted so that they are the last ones."""

    def reduce(x, axis, *args, **kwargs):
        x = materialize(x)
        nd = len(getattr(x, "shape", ()))
        axes = sorted(a + nd if a < 0 else a for a in ((axis,) if isinstance(axis, int) else axis))
        keepdims = kwargs.get("keepdims", args[1] if len(args) > 1 else False)
        if nd and axes != list(range(nd - len(axes), nd)) and not keepdims and 0 not in axes:
            x = x.permute([d for d in range(nd) if d not in axes] + axes)
            axis = tuple(range(nd - len(axes), nd))
        return fn(x, axis, *args, **kwargs)

    reduce.__name__ = fn.__name__
    return reduce


for _name in ("sum", "max", "min", "mean", "prod", "all", "any"):
    globals()[_name] = _wrap(_name, _trailing(getattr(_nl, _name)))


def _load(src, dtype=None):
    src = materialize(src)
    if len(src.shape) == 1:  # NKI 0.1 loads a 1-D access as a column: [P] -> [P, 1]
        src = src.expand_dim(1)
    return _nl.load(src, dtype)


load = _wrap("load", _load)


def _matmul(x, y, transpose_x=False):
    """NKI 0.1's ``nl.matmul`` promotes its operands as its other ``nl`` operations do ("whichever
    input type has the highest precision"): an fp32 tile times a bf16 one (attn_fwd_v1's fp32 softmax
    times its bf16 V) multiplies in fp32, the narrower operand copied to fp32 first (VectorE). TensorE
    pairs fp32 only with fp32 (S16), so the NKI 0.6 call, which does not promote, refuses the mix."""
    x, y = materialize(x), materialize(y)
    wide = (_nl.float32, _nl.tfloat32)
    if (x.dtype in wide) != (y.dtype in wide):
        x, y = (x, _nl.copy(y, _nl.float32)) if x.dtype in wide else (_nl.copy(x, _nl.float32), y)
    return _nl.matmul(x, y, transpose_x=transpose_x)


matmul = _wrap("matmul", _matmul)


# ------------------------------------------------------------------ index grids

def arange(*args):
    """``nl.arange(n)``: an index grid (``[:, None]`` / ``[None, :]`` place it on an axis)."""
    hints.hint("nl.arange")
    return _grid.arange(*args)


class _MGrid:
    def __getitem__(self, key):
        hints.hint("nl.mgrid")
        return _grid.mgrid[key]


mgrid = _MGrid()


# ------------------------------------------------------------------ shapes, buffers, creation


class par_dim(int):
    """``nl.par_dim(n)``: marks the partition dimension of a shape (an int of value ``n``)."""

    def __new__(cls, n):
        hints.hint("nl.par_dim")
        return super().__new__(cls, int(n))


class nc:
    """``nl.nc(n)``: ``n`` NeuronCores in a ``spmd_dim`` launch grid."""

    def __init__(self, n):
        self.n = int(n)

    def __int__(self):
        return self.n

    __index__ = __int__


def spmd_dim(*dims):
    """``nl.spmd_dim(...)``: a launch grid dimension (``kernel[nl.spmd_dim(nl.nc(2), 4)]``)."""
    hints.hint("nl.spmd_dim")
    return math.prod(int(d) for d in dims)


_BUFFERS = {"sbuf": sbuf, "psum": psum, "hbm": hbm, "private_hbm": private_hbm, "shared_hbm": shared_hbm}


def _buffer(buffer):
    if buffer is None or isinstance(buffer, MemoryRegion):
        return buffer
    if isinstance(buffer, str):
        hints.hint("buffer='sbuf'")
        if buffer in _BUFFERS:
            return _BUFFERS[buffer]
    region = getattr(buffer, "memory_region", None)  # neuronxcc.nki.compiler allocators
    if region is not None:
        hints.hint("nki.compiler allocation")
        return region
    raise UnsupportedError(f"buffer={buffer!r} is not an NKI buffer", location=caller_location())


def _split_shape(shape):
    """(block dims, tile shape): the dims before a ``par_dim`` that is not first are blocks."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for i, n in enumerate(shape):
        if isinstance(n, par_dim) and i > 0:
            return tuple(int(x) for x in shape[:i]), tuple(int(x) for x in shape[i:])
    return (), tuple(int(x) for x in shape)


class BlockTensor:
    """A tensor with block dimensions (``(B, par_dim(P), F)``): one ``[P, F]`` tile per block,
    each allocated on its own (as NKI 0.1 does). Index the block dims with ints first."""

    def __init__(self, blocks: tuple, tiles: list, shape: tuple, dtype):
        self.blocks, self.tiles = blocks, tiles
        self.shape = blocks + shape
        self.dtype = dtype

    def _split(self, key):
        key = key if isinstance(key, tuple) else (key,)
        nb = len(self.blocks)
        head = key[:nb]
        idx = 0
        for k, n in zip(head, self.blocks, strict=False):
            if isinstance(k, slice) and k == slice(None) and len(head) == 1 and n == 1:
                k = 0
            i = getattr(k, "__index__", None)
            if i is None:
                raise UnsupportedError(
                    f"block dimension index {k!r}: index the block dims of a {self.shape} tensor with ints",
                    location=caller_location(),
                )
            k = i()
            if not 0 <= k < n:
                from neuronsim.errors import OutOfBoundsError

                raise OutOfBoundsError(
                    f"block index {k} out of range for {self.shape}", location=caller_location()
                )
            idx = idx * n + k
        if len(head) < nb:  # t[i] of (A, B, par_dim(P), F): the blocks (B, par_dim(P), F) of row i
            rest = self.blocks[len(head):]
            n = math.prod(rest)
            sub = BlockTensor(rest, self.tiles[idx * n:(idx + 1) * n], self.shape[nb:], self.dtype)
            return sub, ()
        return self.tiles[idx], key[nb:]

    def __getitem__(self, key):
        tile, rest = self._split(key)
        return tile[rest] if rest else tile

    def __setitem__(self, key, value):
        tile, rest = self._split(key)
        if rest:
            tile[rest] = value
        else:
            tile[...] = value

    def __repr__(self) -> str:
        return f"BlockTensor(shape={self.shape}, dtype={self.dtype})"


def _create(shape, dtype, buffer, name, make):
    blocks, tile_shape = _split_shape(shape)
    buffer = _buffer(buffer)
    if not blocks:
        return make(tile_shape, dtype, buffer, name)
    hints.hint("block dimensions")
    tiles = [make(tile_shape, dtype, buffer, f"{name or 'block'}{i}") for i in range(math.prod(blocks))]
    return BlockTensor(blocks, tiles, tile_shape, dtype)


def ndarray(shape, dtype, buffer=None, name="", **kwargs):
    return _create(shape, dtype, buffer, name, lambda s, d, b, n: _nl.ndarray(s, d, b, n))


def zeros(shape, dtype, buffer=None, name="", **kwargs):
    return _create(shape, dtype, buffer, name, lambda s, d, b, n: _nl.zeros(s, d, b, n))


def ones(shape, dtype, buffer=None, name="", **kwargs):
    return _create(shape, dtype, buffer, name, lambda s, d, b, n: _nl.ones(s, d, b, n))


def full(shape, fill_value, dtype, buffer=None, name="", **kwargs):
    return _create(shape, dtype, buffer, name, lambda s, d, b, n: _nl.full(s, fill_value, d, b, n))


def empty_like(a, dtype=None, buffer=None, name="", **kwargs):
    a = materialize(a)
    return ndarray(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def zeros_like(a, dtype=None, buffer=None, name="", **kwargs):
    a = materialize(a)
    return zeros(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def ones_like(a, dtype=None, buffer=None, name="", **kwargs):
    a = materialize(a)
    return ones(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


# ------------------------------------------------------------------ host-side helpers


def finfo(dtype):
    """``nl.finfo(dtype)``: numpy's ``finfo`` of an NKI float dtype (``.min``, ``.max``, ``.eps``...;
    bfloat16 and the float8 types through ml_dtypes)."""
    from neuronsim.nki.types import numpy_dtype, to_sim_dtype

    nd = numpy_dtype(to_sim_dtype(dtype))
    try:
        return np.finfo(nd)
    except ValueError:
        import ml_dtypes

        return ml_dtypes.finfo(nd)


def static_cast(array, dtype):
    """``nl.static_cast(ndarray, dtype)``: a numpy array cast to an NKI dtype (host side)."""
    from neuronsim.nki.types import numpy_dtype, to_sim_dtype

    return np.asarray(array).astype(numpy_dtype(to_sim_dtype(dtype)))


class _LoopReduce:
    """``dst[...] = nl.loop_reduce(x, op, loop_indices)``: ``dst = op(dst, x)`` (NKI 0.1: "the
    destination tile is also the rhs input to op"), one VectorE instruction."""

    def __init__(self, x, op, mask):
        self.x, self.op, self.mask = x, op, mask

    def nki_assign_into(self, dst) -> None:
        from neuronsim.nki import isa as _isa

        run(lambda d, v: _isa.tensor_tensor(d, d, v, self.op), (dst, self.x), {}, self.mask)

    def nki_materialize(self):
        return materialize(self.x)


def loop_reduce(x, op, loop_indices, mask=None, dtype=None, **kwargs):
    """``nl.loop_reduce``: accumulate ``x`` into the tile it is assigned to, with ``op``."""
    return _LoopReduce(materialize(x), op, mask)


def __getattr__(name):
    raise AttributeError(f"neuronxcc.nki.language.{name} is not simulated")
