"""Tensor views: what indexing, slicing and ``.ap()`` make of a :class:`~neuronsim.nki.buffer.Buffer`.

A view is an element offset and ``(step, num)`` pairs, NKI's access-pattern form, the partition
pair first for SBUF/PSUM. ``index_view`` is the indexing (ints, slices, ``nl.ds``) with its bounds
checks; ``ap_pattern`` gives the IR access pattern (at most 1 + 4 dims, merging where memory is
contiguous). Python's operators on tensors are ``nki.language``'s and live there.
"""

from __future__ import annotations

import math
import threading

from neuronsim.errors import ConstraintError, OutOfBoundsError, UnsupportedError
from neuronsim.nki.buffer import Buffer
from neuronsim.nki.reinterpret import reinterpret
from neuronsim.nki.trace import caller_location
from neuronsim.nki.types import (
    DTYPES,
    MX_DTYPES,
    DynSlice,
    MemoryRegion,
    NkiDtype,
    private_hbm,
    psum,
    sbuf,
    shared_hbm,
)
from neuronsim.sim.ir import ON_CHIP, Memory


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


class TensorView:
    """A tensor in a traced kernel: a view of a :class:`Buffer`, what ``nki.isa`` calls take.

    ``offset`` is in elements from the buffer's start; ``dims`` are the ``(step, num)`` pairs of the
    view's logical dimensions. On-chip views keep the partition dimension first; if an integer index
    removed it, ``ppair`` holds the hidden one-partition pair. Views of a view have its class: the
    tensors kernels hold are ``nl.NkiTensor`` (``language/tensor.py``), which adds the operators.
    """

    __slots__ = ("buf", "offset", "dims", "ppair", "shape", "partitions", "free_size", "size", "indirect")

    def __init__(self, buf: Buffer, offset: int, dims: tuple[tuple[int, int], ...], ppair=None):
        self.buf = buf
        self.offset = offset
        self.dims = dims
        self.ppair = ppair
        self.indirect = None
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
    def whole(cls, buf: Buffer) -> TensorView:
        t = object.__new__(cls)
        shape = buf.shape
        t.buf, t.offset, t.dims, t.ppair, t.shape = buf, 0, row_major(shape), None, shape
        t.indirect = None
        t.size = buf.size
        t.partitions = shape[0] if shape else 1
        t.free_size = buf.size // t.partitions if t.partitions else 0
        return t

    # --- metadata
    @property
    def dtype(self) -> NkiDtype:
        mx = self.buf.mx
        return DTYPES[self.buf.dtype] if mx is None else MX_DTYPES[mx]

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
        """True, as AWS's NkiTensor (an object without ``__bool__``): kernels test a tensor's presence
        (``if params.expert_index:``). The result of an ``nl`` operation in a condition is a
        mistake, though (its values are not known while tracing), so that raises."""
        site = getattr(self.buf, "site", None)
        tag = site[1] if site else ""
        if tag and self.buf.memory is not Memory.HBM:
            raise TypeError(
                f"the values of {self.buf.describe()} (an nl.{tag.split('.')[0]} result) are not "
                f"known while tracing; it cannot be used as a Python condition (use nl.where or a mask)"
            )
        return True

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
    def __getitem__(self, key) -> TensorView:
        if self.indirect is not None:
            self._direct("index")
        return index_view(self, key)

    # --- view methods (the NKI tensor API)
    def ap(
        self,
        pattern,
        offset: int | None = None,
        scalar_offset=None,
        vector_offset=None,
        indirect_dim: int = 0,
        dtype=None,
    ) -> TensorView:
        """A view by NKI access pattern; ``offset`` (elements from the tensor's start) defaults to
        this view's. ``scalar_offset`` / ``vector_offset`` make it indirect (``IndirectOffset``)."""
        if self.indirect is not None:
            self._direct(".ap()")
        buf = self.buf if dtype is None else reinterpret(self.buf, dtype)
        pairs = tuple((int(s), int(n)) for s, n in pattern)
        if not pairs:
            raise ConstraintError(".ap() needs at least one [step, num] pair", location=caller_location())
        view = type(self)(buf, self.offset if offset is None else int(offset), pairs)
        known = getattr(scalar_offset, "known_value", None)
        if known is not None and vector_offset is None:  # a register whose value the trace knows
            dim = int(indirect_dim)
            if not 0 <= dim < len(self.shape):
                raise ConstraintError(f".ap(): indirect_dim={dim} is not a dim of {self.shape}",
                                      location=caller_location())
            view.offset += int(known) * math.prod(self.shape[dim + 1:])
            return view
        if scalar_offset is not None or vector_offset is not None:
            if scalar_offset is not None and vector_offset is not None:
                raise ConstraintError(".ap(): at most one of scalar_offset and vector_offset",
                                      location=caller_location())
            dim = int(indirect_dim)
            if not 0 <= dim < len(self.shape):
                raise ConstraintError(f".ap(): indirect_dim={dim} is not a dim of {self.shape}",
                                      location=caller_location())
            stride = math.prod(self.shape[dim + 1:])  # from the tensor .ap() is called on (S17)
            if vector_offset is not None and dim != 0:
                raise ConstraintError(".ap(): vector_offset supports indirect_dim=0 only (S17)",
                                      location=caller_location())
            view.indirect = IndirectOffset.make(view, scalar_offset, vector_offset, stride)
        return view

    def is_indirect(self) -> bool:
        return self.indirect is not None

    def vector_select(self, dim: int, offsets) -> TensorView:
        """Partition ``p`` of the result is row ``offsets[p]`` of this HBM tensor (a gather view)."""
        if self.indirect is not None:
            self._direct("vector_select")
        if int(dim) != 0:
            raise ConstraintError("vector_select: dim must be 0 (S17)", location=caller_location())
        parts = offsets.shape[0] if isinstance(offsets, TensorView) else 0
        view = type(self)(self.buf, self.offset, ((0, parts),) + self.dims[1:])
        view.indirect = IndirectOffset.make(view, None, offsets, self.dims[0][0])
        return view

    def _direct(self, what: str) -> None:
        if self.indirect is not None:
            raise UnsupportedError(
                f"{what} of an indirect view (scalar_offset / vector_offset / a runtime select): an "
                f"indirect view can only be copied by nisa.dma_copy", location=caller_location())

    def view(self, dtype) -> TensorView:
        """Reinterpret the (whole, contiguous) tensor as another dtype."""
        if self.indirect is not None:
            self._direct("view")
        if self.offset != 0 or self.dims != _row_major(self.buf.shape, 0):
            raise UnsupportedError(
                "view(dtype) is simulated on whole tensors only", location=caller_location()
            )
        return self.whole(reinterpret(self.buf, dtype))

    reinterpret_cast = view

    def reshape(self, shape) -> TensorView:
        if self.indirect is not None:
            self._direct("reshape")
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
            return type(self)(
                self.buf, self.offset, ((self.buf.free_size, shape[0]),) + _row_major(shape[1:], 0)
            )
        if math.prod(shape) > self.buf.free_size - self.offset:
            raise ConstraintError(
                f"reshape {self.shape} -> {shape} needs more elements than {self.buf.describe()} has",
                location=caller_location(),
            )
        return type(self)(self.buf, self.offset, _row_major(shape, 0))

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

    def permute(self, dims) -> TensorView:
        if self.indirect is not None:
            self._direct("permute")
        order = tuple(int(d) for d in dims)
        if sorted(order) != list(range(len(self.dims))):
            raise ValueError(f"permute({order}) is not a permutation of {len(self.dims)} dims")
        if self.on_chip and self.ppair is None and order[0] != 0:
            raise ConstraintError(
                "permute cannot move the partition dimension of an on-chip tensor", location=caller_location()
            )
        return type(self)(self.buf, self.offset, tuple(self.dims[d] for d in order), self.ppair)

    def broadcast(self, dim: int, size: int) -> TensorView:
        if self.indirect is not None:
            self._direct("broadcast")
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
        return type(self)(self.buf, self.offset, tuple(dims), self.ppair)

    def broadcast_to(self, shape) -> TensorView:
        shape = tuple(int(s) for s in shape)
        if index_rules.legacy and self.on_chip and self.ppair is None and len(shape) == len(self.dims) \
                and self.dims[0][1] == 1 != shape[0]:
            return index_rules.legacy.partition_broadcast_to(self, shape)
        t = self
        while len(t.dims) < len(shape):
            t = t.expand_dim(0 if not t.on_chip else 1)
        for d, (n_old, n_new) in enumerate(zip(t.shape, shape, strict=False)):
            if n_old != n_new:
                t = t.broadcast(d, n_new)
        return t

    def expand_dim(self, dim: int) -> TensorView:
        if self.indirect is not None:
            self._direct("expand_dim")
        dims = list(self.dims)
        dims.insert(dim, (1, 1))
        return type(self)(self.buf, self.offset, tuple(dims), self.ppair)

    def squeeze_dim(self, dim: int) -> TensorView:
        if self.indirect is not None:
            self._direct("squeeze_dim")
        if self.dims[dim][1] != 1:
            raise ValueError(f"squeeze_dim: dim {dim} has size {self.dims[dim][1]}, not 1")
        return type(self)(self.buf, self.offset, self.dims[:dim] + self.dims[dim + 1 :], self.ppair)

    def flatten_dims(self, start: int, end: int) -> TensorView:
        if self.indirect is not None:
            self._direct("flatten_dims")
        inner = self.dims[start : end + 1]
        dims = self.dims[:start] + merge_dims(inner, 1, self) + self.dims[end + 1 :]
        return type(self)(self.buf, self.offset, dims, self.ppair)

    def select(self, dim: int, index) -> TensorView:
        """Drop ``dim`` at ``index``; an SBUF [1, 1] index tensor makes a runtime (indirect) select."""
        if self.indirect is not None:
            self._direct("select")
        if isinstance(index, TensorView):
            dim = int(dim)
            view = type(self)(self.buf, self.offset, self.dims[:dim] + self.dims[dim + 1:], self.ppair)
            view.indirect = IndirectOffset.make(view, index, None, self.dims[dim][0])
            return view
        key = [slice(None)] * len(self.dims)
        key[dim] = int(index)
        return index_view(self, tuple(key))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> TensorView:
        if self.indirect is not None:
            self._direct("slice")
        key = [slice(None)] * len(self.dims)
        key[dim] = slice(start, end, step)
        return index_view(self, tuple(key))


class IndirectOffset:
    """The runtime part of an indirect view: offsets in SBUF, scalar ([1, 1]) or vector ([P, 1]),
    each moving the access by ``offset * stride`` elements (``stride`` of the indirect dim)."""

    __slots__ = ("offsets", "vector", "stride")

    def __init__(self, offsets: TensorView, vector: bool, stride: int):
        self.offsets, self.vector, self.stride = offsets, vector, stride

    @classmethod
    def make(cls, view: TensorView, scalar, vector, stride: int) -> IndirectOffset:
        offsets = vector if vector is not None else scalar
        kind = "vector_offset" if vector is not None else "scalar_offset"
        if hasattr(offsets, "offset_word") and vector is None:  # a VirtualRegister: the DGE reads its value
            offsets = offsets.offset_word()
        if not isinstance(offsets, TensorView):
            raise UnsupportedError(
                f"{kind}={type(offsets).__name__}: offsets are SBUF index tensors (or a VirtualRegister "
                f"scalar_offset)", location=caller_location())
        if offsets.buf.memory is not Memory.SBUF:
            raise ConstraintError(f"{kind} must be an SBUF tensor; got {offsets!r}",
                                  location=caller_location())
        if view.buf.memory is not Memory.HBM:
            raise UnsupportedError(
                f"{kind} on {view!r}: indirect access is simulated on HBM tensors (the DMA gather/"
                f"scatter form); copy the SBUF tile with nisa.tensor_copy or local_gather instead",
                location=caller_location())
        return cls(offsets, vector is not None, int(stride))


def merge_dims(dims, limit: int, t: TensorView) -> tuple[tuple[int, int], ...]:
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


def _as_index(k) -> int | None:
    if type(k) is int:
        return k
    if isinstance(k, (slice, DynSlice, bool)) or k is None:
        return None
    index = getattr(k, "__index__", None)
    return None if index is None else index()


def _slice(k: slice, num: int, d: int, t: TensorView) -> tuple[int, int, int]:
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


def index_view(t: TensorView, key) -> TensorView:
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
            return type(t)(t.buf, offset, tuple(dims), t.ppair)
    return _index_view(t, key)


class _IndexRules(threading.local):
    legacy = None  # NKI 0.1's rules while a legacy kernel is traced (legacy/call.py's _IndexRules)


index_rules = _IndexRules()


def _index_view(t: TensorView, key) -> TensorView:
    if index_rules.legacy is not None and (past := index_rules.legacy.past_end(t, key)) is not None:
        return past
    for k in key:  # an index grid (the legacy API's nl.arange / nl.mgrid) does its own indexing
        if hasattr(type(k), "nki_index_grid"):
            return k.nki_index_grid(t, key)
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
    last_dropped = None  # (position, step) of the last free dim an int index dropped
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
            else:
                last_dropped = (len(dims), step)
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
    if partition_dim and ppair is None and len(dims) < 2 and last_dropped is not None and dims:
        # NKI 0.6: an on-chip tensor stays >= 2-D; an int index that would leave only the partition
        # dim keeps the last free dim at size 1 (t[:, 3] of a [P, F] tile is [P, 1])
        at, step = last_dropped
        dims.insert(at, (step, 1))
    return type(t)(t.buf, offset, tuple(dims), ppair)


