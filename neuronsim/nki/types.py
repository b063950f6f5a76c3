"""Small value types of the NKI language: dtypes, memory buffers, dynamic slices.

NKI names dtypes by string (``nl.float32 == "float32"``); :class:`NkiDtype` is such a string that
also compares equal to the numpy / ml_dtypes dtype it stands for, so ``x.dtype == np.float32`` and
``x.dtype == nl.float32`` both hold in a kernel.
"""

from __future__ import annotations

import numpy as np

from neuronsim.errors import DtypeError
from neuronsim.sim.dtypes import DType, dtype_of
from neuronsim.sim.ir import Memory


class NkiDtype(str):
    """A dtype name that compares equal to its numpy dtype, DType, or name."""

    __slots__ = ()

    @property
    def sim(self) -> DType:
        return _SIM[self]

    @property
    def itemsize(self) -> int:
        return _SIM[self].itemsize

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, "bool" if other == "bool_" else other)
        named = None
        if isinstance(other, np.dtype) and str.__str__(self) in MX_STORAGE:
            named = host_mx_name(other)
        # an MX name against a host array's MX dtype (neuron_dtypes-style): the format decides
        if named is not None:
            return str.__eq__(self, named)
        try:
            return to_sim_dtype(other) is _SIM[self]
        except DtypeError:
            return False

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


_NAMES = {d: ("bool" if d is DType.bool_ else d.name) for d in DType}
DTYPES: dict[DType, NkiDtype] = {d: NkiDtype(n) for d, n in _NAMES.items()}
_SIM: dict[str, DType] = {str(n): d for d, n in DTYPES.items()}
# OCP MX formats (NeuronCore-v4): x4-packed data words and E8M0 scale bytes, stored as the unsigned
# word of their size; a buffer made with one of these names remembers it (``Buffer.mx``).
MX_STORAGE = {"float8_e4m3fn_x4": DType.uint32, "float8_e5m2_x4": DType.uint32,
              "float4_e2m1fn_x4": DType.uint16, "float8_e8m0fnu": DType.uint8}
MX_DTYPES: dict[str, NkiDtype] = {n: NkiDtype(n) for n in MX_STORAGE}
_SIM.update(MX_STORAGE)


def mx_name(x) -> str | None:
    """The MX format name of a dtype argument, or None."""
    name = str(x) if isinstance(x, str) else getattr(x, "__name__", None)
    return name if name in MX_STORAGE else None


def host_mx_dtype(name: str) -> np.dtype:
    """The numpy dtype of a host array of MX ``name`` words: the storage word, named in its metadata
    (as AWS's ``neuron_dtypes`` x4 dtypes carry their format), so a kernel argument keeps its format."""
    return np.dtype(MX_STORAGE[name].numpy, metadata={"nki_dtype": name})


def host_mx_name(dtype) -> str | None:
    """The MX format a host array's numpy dtype names, or None: ``host_mx_dtype``'s metadata, or a
    one-field record dtype named by the format (``named_mx_dtype``, AWS ``neuron_dtypes``-style)."""
    metadata = getattr(dtype, "metadata", None)
    name = metadata.get("nki_dtype") if metadata else None
    if name is None and isinstance(dtype, np.dtype) and dtype.names is not None and len(dtype.names) == 1:
        name = dtype.names[0]
    return name if name in MX_STORAGE else None


def named_mx_dtype(name: str) -> np.dtype:
    """A numpy dtype whose name shows the MX format, as AWS's ``neuron_dtypes`` x4 dtypes do
    (``'x4' in str(a.dtype)`` is how nki-library's references tell packed arrays): a record of one
    storage word named ``name``. Kernels take such arrays as ``host_mx_dtype`` words (``host_words``)."""
    return np.dtype([(name, MX_STORAGE[name].numpy)], metadata={"nki_dtype": name})


def host_words(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or, for a ``named_mx_dtype`` array, a view of it as ``host_mx_dtype`` words."""
    name = host_mx_name(a.dtype) if a.dtype.names is not None else None
    return a.view(host_mx_dtype(name)) if name is not None else a


def to_sim_dtype(x) -> DType:
    """The simulator DType for an NKI dtype name, numpy dtype/type, ml_dtypes type or DType."""
    if isinstance(x, NkiDtype):
        return _SIM[x]
    if isinstance(x, str):
        hit = _SIM.get(x) or _SIM.get("bool" if x == "bool_" else x)
        if hit is not None:
            return hit
    if x is bool:
        return DType.bool_
    try:
        return dtype_of(x)
    except TypeError as exc:
        raise DtypeError(f"{x!r} is not a NeuronCore dtype ({exc})") from None


def numpy_dtype(x) -> np.dtype:
    d = to_sim_dtype(x)
    return np.dtype(np.float32) if d is DType.tfloat32 else d.numpy


class MemoryRegion:
    """A memory buffer of the NKI language (``nl.sbuf``, ``nl.psum``, ``nl.hbm``...)."""

    __slots__ = ("name", "memory", "shared")

    def __init__(self, name: str, memory: Memory, shared: bool = False):
        self.name = name
        self.memory = memory
        self.shared = shared

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return other == self.name or (other == "hbm" and self.name == "private_hbm")
        if isinstance(other, MemoryRegion):
            return self.memory is other.memory and self.shared == other.shared
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.memory, self.shared))


sbuf = MemoryRegion("sbuf", Memory.SBUF)
psum = MemoryRegion("psum", Memory.PSUM)
private_hbm = MemoryRegion("private_hbm", Memory.HBM)
hbm = private_hbm  # "HBM - alias of private_hbm"
shared_hbm = MemoryRegion("shared_hbm", Memory.HBM, shared=True)

_REGIONS = {"sbuf": sbuf, "psum": psum, "hbm": hbm, "private_hbm": private_hbm, "shared_hbm": shared_hbm}


def region_of(buffer) -> MemoryRegion:
    if buffer is None:
        return sbuf
    if isinstance(buffer, MemoryRegion):
        return buffer
    if isinstance(buffer, str) and buffer in _REGIONS:
        return _REGIONS[buffer]
    raise ValueError(
        f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum, nl.hbm, nl.private_hbm or nl.shared_hbm"
    )


class DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start + size``."""

    __slots__ = ("start", "size")

    def __init__(self, start: int, size: int):
        self.start = int(start)
        self.size = int(size)

    def __repr__(self) -> str:
        return f"nl.ds({self.start}, {self.size})"
