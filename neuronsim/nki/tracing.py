"""Tracing a kernel: tracer tensors, indexing into access patterns, source lines, the trace.

A kernel runs once per signature with :class:`NkiTensor` arguments. Every ``nl.ndarray`` (and every
tile an ``nl`` operation creates) is a :class:`Buffer`; indexing, slicing and ``.ap()`` make views
of it (an element offset and ``(step, num)`` pairs, NKI's access-pattern form). Every ``nisa`` call
appends one instruction record to the :class:`Trace`, with the ``file:line`` of the kernel line
that made it. Loops are Python loops, so they unroll; ``affine_range`` also records which loop an
allocation happened in, for the allocator's rotating buffers.

Instruction records keep views, not IR access patterns: on-chip addresses are only known once the
allocator has seen the whole trace (``allocate.py``); ``build.py`` turns the records into a Program.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from typing import Any

from neuronsim.errors import ConstraintError, OutOfBoundsError, UnsupportedError
from neuronsim.nki.types import (
    DTYPES,
    DynSlice,
    MemoryRegion,
    NkiDtype,
    private_hbm,
    psum,
    sbuf,
    shared_hbm,
    to_sim_dtype,
)
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ON_CHIP, Memory

_NKI_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_where: dict = {}  # code object -> display file name, or None for code inside neuronsim/nki


def _display_name(code) -> str | None:
    filename = code.co_filename
    if filename.startswith(_NKI_DIR):
        name = None
    else:
        try:
            rel = os.path.relpath(filename)
            name = rel if not rel.startswith("..") else filename
        except ValueError:
            name = filename
    _where[code] = name
    return name


def caller_location(depth: int = 2) -> str | None:
    """``file:line`` of the innermost frame outside ``neuronsim/nki`` (the kernel's line)."""
    f = sys._getframe(depth)
    where = _where
    while f is not None:
        code = f.f_code
        name = where.get(code, where)
        if name is where:
            name = _display_name(code)
        if name is not None:
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return None


# ---------------------------------------------------------------- buffers


class Buffer:
    """One allocation: a kernel argument, an ``nl.ndarray``, or a tile an ``nl`` operation made.

    ``first`` / ``last`` are the indices of the first and last instruction that touch it (the
    allocator's live range). ``site`` groups the allocations one source line makes across loop
    iterations; ``site_index`` orders them.
    """

    __slots__ = (
        "id",
        "name",
        "memory",
        "shape",
        "dtype",
        "kind",
        "location",
        "first",
        "last",
        "site",
        "site_index",
        "rotating",
        "address",
        "pinned",
        "alias_of",
        "shared",
        "written",
        "acc_boxes",
        "free_size",
        "arg_index",
        "on_chip",
        "size",
    )

    def __init__(
        self,
        id: int,
        name: str,
        memory: Memory,
        shape: tuple[int, ...],
        dtype,
        kind: str,
        location: str | None,
        shared: bool = False,
    ):
        self.id = id
        self.name = name
        self.memory = memory
        self.shape = shape
        self.dtype = dtype if type(dtype) is DType else to_sim_dtype(dtype)
        self.kind = kind
        self.location = location
        self.first = -1
        self.last = -1
        self.site = None
        self.site_index = 0
        self.rotating = False
        self.address: tuple[int, int] | None = None
        self.pinned = False
        self.alias_of: Buffer | None = None
        self.shared = shared
        self.written = False
        self.acc_boxes: list | None = [] if memory is Memory.PSUM else None
        size = 1
        for n in shape:
            size *= n
        self.size = size
        self.on_chip = memory is not Memory.HBM
        self.free_size = (size // shape[0] if shape[0] else 0) if self.on_chip else size
        self.arg_index = -1

    @property
    def bytes_per_partition(self) -> int:
        return self.free_size * self.dtype.itemsize

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.memory.name} tensor '{self.name}' [{dims}] {DTYPES[self.dtype]}"

    def root(self) -> Buffer:
        return self.alias_of if self.alias_of is not None else self


# ---------------------------------------------------------------- tracer tensors


def _region_of_buffer(buf: Buffer) -> MemoryRegion:
    if buf.memory is Memory.SBUF:
        return sbuf
    if buf.memory is Memory.PSUM:
        return psum
    return shared_hbm if buf.shared else private_hbm


def _row_major(shape, offset: int = 0, base_step: int = 1) -> tuple[tuple[int, int], ...]:
    dims = []
    step = base_step
    for n in reversed(shape):
        dims.append((step, int(n)))
        step *= int(n)
    return tuple(reversed(dims))


_ROW_MAJOR: dict = {}


def row_major(shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The ``(step, num)`` dims of a whole row-major tensor of ``shape`` (memoized)."""
    dims = _ROW_MAJOR.get(shape)
    if dims is None:
        dims = _ROW_MAJOR[shape] = _row_major(shape)
    return dims


class NkiTensor:
    """A tensor in a traced kernel: a view of a :class:`Buffer`.

    ``offset`` is in elements from the buffer's start; ``dims`` are the ``(step, num)`` pairs of the
    view's logical dimensions. On-chip views keep the partition dimension first; if an integer index
    removed it, ``ppair`` holds the hidden one-partition pair.
    """

    __slots__ = ("buf", "offset", "dims", "ppair", "shape", "partitions", "free_size", "size")
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, buf: Buffer, offset: int, dims: tuple[tuple[int, int], ...], ppair=None):
        self.buf = buf
        self.offset = offset
        self.dims = dims
        self.ppair = ppair
        shape = self.shape = tuple([n for _, n in dims])
        # Partitions and elements per partition as an operand (precomputed: every check reads them).
        size = 1
        for n in shape:
            size *= n
        self.size = size
        if ppair is not None or not shape:
            self.partitions = 1 if buf.on_chip or not shape else shape[0]
        else:
            self.partitions = shape[0]
        p = self.partitions
        self.free_size = size // p if p else 0

    @classmethod
    def whole(cls, buf: Buffer) -> NkiTensor:
        t = object.__new__(cls)
        shape = buf.shape
        t.buf, t.offset, t.dims, t.ppair, t.shape = buf, 0, row_major(shape), None, shape
        t.size = buf.size
        t.partitions = shape[0] if shape else 1
        t.free_size = buf.size // t.partitions if t.partitions else 0
        return t

    # --- metadata
    @property
    def dtype(self) -> NkiDtype:
        return DTYPES[self.buf.dtype]

    @property
    def buffer(self) -> MemoryRegion:
        return _region_of_buffer(self.buf)

    @property
    def name(self) -> str:
        return self.buf.name

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.dims)

    @property
    def pattern(self) -> list[list[int]]:
        return [list(p) for p in self.ap_pattern()]

    def get_pattern(self) -> list[list[int]]:
        return self.pattern

    @property
    def memory(self) -> Memory:
        return self.buf.memory

    @property
    def on_chip(self) -> bool:
        return self.buf.on_chip

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self.buf.name!r}, shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def __bool__(self) -> bool:
        raise TypeError(
            "the value of an NKI tensor is not known while tracing; it cannot be used as a Python condition"
        )

    def __iter__(self):
        raise TypeError("NKI tensors cannot be iterated over while tracing; index them instead")

    def ap_pattern(self) -> tuple[tuple[int, int], ...]:
        """The IR access pattern pairs: partition pair first (on chip), at most 1 + 4 dims."""
        dims = self.dims
        if self.buf.memory in ON_CHIP:
            if self.ppair is not None:
                dims = (self.ppair,) + dims
            if not dims:
                dims = ((self.buf.free_size, 1),)
            if len(dims) == 1:
                dims = dims + ((1, 1),)
            return dims if len(dims) <= 5 else dims[:1] + merge_dims(dims[1:], 4, self)
        if len(dims) == 0:
            return ((1, 1), (1, 1))
        if len(dims) == 1:
            return ((dims[0][0] * dims[0][1] or 1, 1), dims[0])
        return dims if len(dims) <= 5 else merge_dims(dims, 5, self)

    # --- indexing
    def __getitem__(self, key) -> NkiTensor:
        return index_view(self, key)

    def __setitem__(self, key, value) -> None:
        from neuronsim.nki import language

        language.assign(self[key], value)

    # --- view methods (NkiTensor API)
    def ap(
        self,
        pattern,
        offset: int = 0,
        scalar_offset=None,
        vector_offset=None,
        indirect_dim: int = 0,
        dtype=None,
    ) -> NkiTensor:
        if scalar_offset is not None or vector_offset is not None:
            raise UnsupportedError(
                "indirect access patterns (scalar_offset / vector_offset) are not simulated",
                location=caller_location(),
            )
        buf = self.buf if dtype is None else reinterpret(self.buf, dtype)
        pairs = tuple((int(s), int(n)) for s, n in pattern)
        if not pairs:
            raise ConstraintError(".ap() needs at least one [step, num] pair", location=caller_location())
        return NkiTensor(buf, int(offset), pairs)

    def view(self, dtype) -> NkiTensor:
        """Reinterpret the (whole, contiguous) tensor as another dtype."""
        if self.offset != 0 or self.dims != _row_major(self.buf.shape, 0):
            raise UnsupportedError(
                "view(dtype) is simulated on whole tensors only", location=caller_location()
            )
        return NkiTensor.whole(reinterpret(self.buf, dtype))

    reinterpret_cast = view

    def reshape(self, shape) -> NkiTensor:
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if not self.is_contiguous():
            raise UnsupportedError(
                f"reshape of a non-contiguous view {self.shape}", location=caller_location()
            )
        if self.on_chip:
            if self.ppair is not None or shape[0] != self.shape[0]:
                raise ConstraintError(
                    f"reshape {self.shape} -> {shape} would change the partition dimension of "
                    f"an on-chip tensor",
                    location=caller_location(),
                )
            if math.prod(shape[1:]) > self.buf.free_size:
                raise ConstraintError(
                    f"reshape {self.shape} -> {shape} needs more elements per partition than "
                    f"{self.buf.describe()} has",
                    location=caller_location(),
                )
            return NkiTensor(
                self.buf, self.offset, ((self.buf.free_size, shape[0]),) + _row_major(shape[1:], 0)
            )
        if math.prod(shape) > self.buf.free_size - self.offset:
            raise ConstraintError(
                f"reshape {self.shape} -> {shape} needs more elements than {self.buf.describe()} has",
                location=caller_location(),
            )
        return NkiTensor(self.buf, self.offset, _row_major(shape, 0))

    def is_contiguous(self) -> bool:
        dims = self.dims
        if self.on_chip and self.ppair is None:
            dims = dims[1:]
        expect = 1
        for step, num in reversed(dims):
            if num == 1:
                continue
            if step != expect:
                return False
            expect *= num
        return True

    def permute(self, dims) -> NkiTensor:
        order = tuple(int(d) for d in dims)
        if sorted(order) != list(range(len(self.dims))):
            raise ValueError(f"permute({order}) is not a permutation of {len(self.dims)} dims")
        if self.on_chip and self.ppair is None and order[0] != 0:
            raise ConstraintError(
                "permute cannot move the partition dimension of an on-chip tensor", location=caller_location()
            )
        return NkiTensor(self.buf, self.offset, tuple(self.dims[d] for d in order), self.ppair)

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        if self.dims[dim][1] != 1:
            raise ValueError(f"broadcast: dim {dim} has size {self.dims[dim][1]}, not 1")
        if self.on_chip and self.ppair is None and dim == 0:
            raise ConstraintError(
                "an on-chip tensor cannot be broadcast along its partition dimension; "
                "broadcast the HBM view before loading it",
                location=caller_location(),
            )
        dims = list(self.dims)
        dims[dim] = (0, int(size))
        return NkiTensor(self.buf, self.offset, tuple(dims), self.ppair)

    def broadcast_to(self, shape) -> NkiTensor:
        shape = tuple(int(s) for s in shape)
        t = self
        while len(t.dims) < len(shape):
            t = t.expand_dim(0 if not t.on_chip else 1)
        for d, (n_old, n_new) in enumerate(zip(t.shape, shape, strict=False)):
            if n_old != n_new:
                t = t.broadcast(d, n_new)
        return t

    def expand_dim(self, dim: int) -> NkiTensor:
        dims = list(self.dims)
        dims.insert(dim, (1, 1))
        return NkiTensor(self.buf, self.offset, tuple(dims), self.ppair)

    def squeeze_dim(self, dim: int) -> NkiTensor:
        if self.dims[dim][1] != 1:
            raise ValueError(f"squeeze_dim: dim {dim} has size {self.dims[dim][1]}, not 1")
        return NkiTensor(self.buf, self.offset, self.dims[:dim] + self.dims[dim + 1 :], self.ppair)

    def flatten_dims(self, start: int, end: int) -> NkiTensor:
        inner = self.dims[start : end + 1]
        merged = merge_dims(inner, 1, self)
        return NkiTensor(self.buf, self.offset, self.dims[:start] + merged + self.dims[end + 1 :], self.ppair)

    def select(self, dim: int, index: int) -> NkiTensor:
        key = [slice(None)] * len(self.dims)
        key[dim] = int(index)
        return index_view(self, tuple(key))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        key = [slice(None)] * len(self.dims)
        key[dim] = slice(start, end, step)
        return index_view(self, tuple(key))

    # --- operators map to nki.language
    def _op(self, name, other, swap=False):
        from neuronsim.nki import language

        fn = getattr(language, name)
        return fn(other, self) if swap else fn(self, other)

    def __add__(self, o):
        return self._op("add", o)

    def __radd__(self, o):
        return self._op("add", o, True)

    def __sub__(self, o):
        return self._op("subtract", o)

    def __rsub__(self, o):
        return self._op("subtract", o, True)

    def __mul__(self, o):
        return self._op("multiply", o)

    def __rmul__(self, o):
        return self._op("multiply", o, True)

    def __truediv__(self, o):
        return self._op("divide", o)

    def __rtruediv__(self, o):
        return self._op("divide", o, True)

    def __pow__(self, o):
        return self._op("power", o)

    def __lt__(self, o):
        return self._op("less", o)

    def __le__(self, o):
        return self._op("less_equal", o)

    def __gt__(self, o):
        return self._op("greater", o)

    def __ge__(self, o):
        return self._op("greater_equal", o)

    def __and__(self, o):
        return self._op("bitwise_and", o)

    def __or__(self, o):
        return self._op("bitwise_or", o)

    def __xor__(self, o):
        return self._op("bitwise_xor", o)

    def __neg__(self):
        from neuronsim.nki import language

        return language.negative(self)

    __hash__ = object.__hash__


def merge_dims(dims, limit: int, t: NkiTensor) -> tuple[tuple[int, int], ...]:
    """Merge adjacent dims that walk memory contiguously until at most ``limit`` remain."""
    out = [d for d in dims if d[1] != 1] or [(1, 1)]
    i = len(out) - 1
    while len(out) > limit and i > 0:
        (s0, n0), (s1, n1) = out[i - 1], out[i]
        if s0 == s1 * n1:
            out[i - 1 : i + 1] = [(s1, n0 * n1)]
        i -= 1
    if len(out) > limit:
        raise UnsupportedError(
            f"{t!r} needs {len(out)} access-pattern dims; the hardware has at most {limit} "
            f"(they cannot be merged)",
            location=caller_location(),
        )
    return tuple(out)


def reinterpret(buf: Buffer, dtype) -> Buffer:
    """An alias of ``buf`` (same bytes) with another dtype."""
    d = to_sim_dtype(dtype)
    root = buf.root()
    if d is root.dtype:
        return root
    if root.memory not in ON_CHIP:
        raise UnsupportedError(
            "dtype reinterpretation of HBM tensors is not simulated", location=caller_location()
        )
    nbytes = root.bytes_per_partition
    if nbytes % d.itemsize:
        raise ConstraintError(
            f"{root.describe()} has {nbytes} bytes per partition, not a multiple of "
            f"{DTYPES[d]}'s {d.itemsize}",
            location=caller_location(),
        )
    trace = current_trace()
    for b in trace.aliases.get(root.id, ()):
        if b.dtype is d:
            return b
    alias = trace.new_buffer(
        f"{root.name}_as_{DTYPES[d]}",
        root.memory,
        (root.shape[0], nbytes // d.itemsize),
        d,
        root.location,
        register=False,
    )
    alias.alias_of = root
    trace.aliases.setdefault(root.id, []).append(alias)
    return alias


def _as_index(k) -> int | None:
    if type(k) is int:
        return k
    if isinstance(k, (slice, DynSlice, bool)) or k is None:
        return None
    index = getattr(k, "__index__", None)
    return None if index is None else index()


def _slice(k: slice, num: int, d: int, t: NkiTensor) -> tuple[int, int, int]:
    """(start, count, step) of a slice on a dim of size ``num``; explicit bounds outside it are errors."""
    start, stop, step = k.start, k.stop, k.step
    if step is None and (start is None or type(start) is int) and (stop is None or type(stop) is int):
        start = 0 if start is None else (start + num if start < 0 else start)
        stop = num if stop is None else (stop + num if stop < 0 else stop)
        if 0 <= start <= num and 0 <= stop <= num:
            return start, max(0, stop - start), 1
    else:
        for bound in (start, stop):
            b = _as_index(bound) if bound is not None else None
            if b is not None and not -num <= b <= num:
                break
        else:
            start, stop, step = k.indices(num)
            return start, len(range(start, stop, step)), step
    raise OutOfBoundsError(
        f"slice {k.start}:{k.stop} is out of range for dim {d} (size {num}) of {t!r}",
        location=caller_location(),
    )


def index_view(t: NkiTensor, key) -> NkiTensor:
    if type(key) is not tuple:
        key = (key,)
    tdims = t.dims
    if len(key) == len(tdims):  # fast path: unit-step slices with non-negative int bounds
        offset = t.offset
        dims = []
        for k, (step, num) in zip(key, tdims):  # noqa: B905 (lengths checked)
            if type(k) is not slice or k.step is not None:
                break
            a, b = k.start, k.stop
            if a is None:
                a = 0
            elif type(a) is not int or not 0 <= a <= num:
                break
            if b is None:
                b = num
            elif type(b) is not int or not 0 <= b <= num:
                break
            offset += a * step
            dims.append((step, b - a if b > a else 0))
        else:
            return NkiTensor(t.buf, offset, tuple(dims), t.ppair)
    return _index_view(t, key)


def _index_view(t: NkiTensor, key) -> NkiTensor:
    n = len(t.dims)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (n - (len(key) - 1)) + key[at + 1 :]
    if len(key) > n:
        raise OutOfBoundsError(f"{len(key)} indices for {t!r} with {n} dims", location=caller_location())
    offset = t.offset
    dims = []
    ppair = t.ppair
    partition_dim = ppair is None and t.buf.memory in ON_CHIP
    tdims = t.dims
    for d, k in enumerate(key):
        step, num = tdims[d]
        if type(k) is slice:
            start, count, st = _slice(k, num, d, t)
            if st != 1 and d == 0 and partition_dim:
                raise ConstraintError(
                    f"slice step {st} on the partition dimension of {t!r}: on-chip accesses "
                    f"cover consecutive partitions",
                    location=caller_location(),
                )
            offset += start * step
            dims.append((step * st, count))
            continue
        i = _as_index(k)
        if i is not None:
            if i < 0:
                i += num
            if not 0 <= i < num:
                raise OutOfBoundsError(
                    f"index {k} is out of range for dim {d} (size {num}) of {t!r}", location=caller_location()
                )
            offset += i * step
            if d == 0 and partition_dim:
                ppair = (step, 1)
            continue
        if isinstance(k, DynSlice):
            if k.start < 0 or k.start + k.size > num or k.size < 0:
                raise OutOfBoundsError(
                    f"{k!r} is out of range for dim {d} (size {num}) of {t!r}", location=caller_location()
                )
            offset += k.start * step
            dims.append((step, k.size))
            continue
        raise UnsupportedError(
            f"index {k!r} ({type(k).__name__}) is not supported; use ints, slices or nl.ds",
            location=caller_location(),
        )
    if len(key) < n:
        dims.extend(tdims[len(key) :])
    return NkiTensor(t.buf, offset, tuple(dims), ppair)


# ---------------------------------------------------------------- the trace


class LoopFrame:
    __slots__ = ("kind", "location", "iteration")

    def __init__(self, kind: str, location: str | None):
        self.kind = kind
        self.location = location
        self.iteration = 0


class Trace:
    """Everything one kernel instance records: buffers, instruction records, loops, side data."""

    def __init__(self, name: str, chip: ChipSpec, program_id: tuple[int, ...], grid: tuple[int, ...]):
        self.name = name
        self.chip = chip
        self.program_id = program_id
        self.grid = grid
        self.buffers: list[Buffer] = []
        self.records: list[tuple] = []  # (opcode, engine, dst, srcs, imm, location, name, queue, dst2)
        self.loops: list[LoopFrame] = []
        self.affine_key: tuple = ()  # locations of the enclosing affine_range loops
        self.aliases: dict[int, list[Buffer]] = {}
        self.site_counts: dict[Any, int] = {}
        self.dma_queue = 0
        self.matmul_flops = 0
        self.transpose_flops = 0
        self.prints: list[tuple[str, Buffer]] = []
        self.barriers: list[int] = []  # record index where each core_barrier split the program
        self.identity: dict = {}
        self.names: dict[str, int] = {}
        self.scalar_regs = None  # the ScalarE reduce registers' value (emulated, see isa.activation)
        self.hbm_fill: dict[int, float] = {}  # HBM buffer id -> value the host fills it with (nl.zeros/full)
        self.constants: dict = {}  # HBM buffer id -> numpy array (nl.shared_constant)

    def unique_name(self, name: str) -> str:
        n = self.names.get(name)
        self.names[name] = 1 if n is None else n + 1
        return name if n is None else f"{name}_{n}"

    def new_buffer(
        self,
        name: str,
        memory: Memory,
        shape,
        dtype,
        location,
        *,
        kind: str = "scratch",
        shared: bool = False,
        tag: str = "",
        register: bool = True,
    ) -> Buffer:
        buf = Buffer(
            len(self.buffers),
            self.unique_name(name),
            memory,
            shape if type(shape) is tuple else tuple(int(s) for s in shape),
            dtype,
            kind,
            location,
            shared,
        )
        self.buffers.append(buf)
        if register and memory in ON_CHIP:
            affine = self.affine_key
            site = (location, tag, affine)
            buf.site = site
            buf.site_index = self.site_counts.get(site, 0)
            self.site_counts[site] = buf.site_index + 1
            buf.rotating = bool(affine)
        return buf

    def new_tile(self, name: str, memory: Memory, shape: tuple[int, ...], dtype: DType, location, tag: str):
        """An on-chip buffer (the fast path of :meth:`new_buffer`), registered at its allocation site."""
        n = self.names.get(name)
        self.names[name] = 1 if n is None else n + 1
        buf = Buffer(len(self.buffers), name if n is None else f"{name}_{n}", memory, shape, dtype, "scratch",
                     location)
        self.buffers.append(buf)
        affine = self.affine_key
        site = (location, tag, affine)
        buf.site = site
        index = buf.site_index = self.site_counts.get(site, 0)
        self.site_counts[site] = index + 1
        buf.rotating = bool(affine)
        return buf

    def next_dma_queue(self) -> int:
        q = self.dma_queue
        self.dma_queue = (q + 1) % self.chip.dma_queues_per_engine
        return q


_state = threading.local()


def current_trace() -> Trace:
    try:
        trace = _state.trace
    except AttributeError:
        trace = None
    if trace is None:
        raise RuntimeError(
            "NKI language and ISA calls are only valid inside a kernel being traced "
            "(an @nki.jit function run through nki.simulate or called with arrays)"
        )
    return trace


def active_trace() -> Trace | None:
    return getattr(_state, "trace", None)


class tracing:
    """Context manager making ``trace`` the current trace of this thread."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def __enter__(self) -> Trace:
        self.prev = getattr(_state, "trace", None)
        _state.trace = self.trace
        return self.trace

    def __exit__(self, *exc) -> None:
        _state.trace = self.prev


def loop(kind: str, start, stop=None, step=1):
    """The iterator behind ``affine_range`` / ``sequential_range`` / ``static_range``."""
    if stop is None:
        start, stop = 0, start
    r = range(int(start), int(stop), int(step))
    trace = active_trace()
    if trace is None:
        return iter(r)
    return _traced_loop(trace, kind, r, caller_location(3))


def _traced_loop(trace: Trace, kind: str, r: range, location):
    frame = LoopFrame(kind, location)
    trace.loops.append(frame)
    outer_key = trace.affine_key
    if kind == "affine":
        trace.affine_key = outer_key + (location,)
    try:
        for i in r:
            yield i
            frame.iteration += 1
    finally:
        trace.loops.remove(frame)
        trace.affine_key = outer_key
