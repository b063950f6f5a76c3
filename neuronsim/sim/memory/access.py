"""Reading and writing access patterns: the encoded form both executors share.

An access pattern is encoded in ``AP_WIDTH`` int64 fields of an instruction row:
``tensor id, dtype code, byte_start, pitch_bytes, partitions, (stride, size) x 4``. The byte
address of element ``(p, i1, i2, i3, i4)`` is

    base[tensor] + byte_start + p * pitch_bytes + (i1*s1 + i2*s2 + i3*s3 + i4*s4) * itemsize

where ``base`` is the tensor's first byte (HBM: its host array; SBUF/PSUM: its partition and byte
placement in the core's memory) and ``pitch_bytes`` is the partition stride (HBM: the first
pair's step in bytes; SBUF/PSUM: the memory's bytes per partition). The validator has proved every
address in bounds before a Program reaches an executor, so the Numba functions here do no checks.

Values travel as ``float32[P, N]`` arrays (``N`` = free elements, row-major over the free dims),
or ``int64[P, N]`` for integer bit operations.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import MAX_FREE_DIMS, AccessPattern, Memory
from neuronsim.sim.memory.numerics import decode, encode, encode_int, load_f32, load_i64, store_f32, store_i64

AP_WIDTH = 5 + 2 * MAX_FREE_DIMS
F_TENSOR, F_DTYPE, F_START, F_PITCH, F_PARTS, F_DIMS = 0, 1, 2, 3, 4, 5

_ITEMSIZE = np.array([DType(c).itemsize for c in range(len(DType))], dtype=np.int64)
_RAW_CODE = {1: DType.uint8, 2: DType.uint16, 4: DType.uint32}
_RAW_CODES = np.array([_RAW_CODE[DType(c).itemsize] for c in range(len(DType))], dtype=np.int64)


def encode_ap(ap: AccessPattern, pitch_of_memory: dict[Memory, int]) -> list[int]:
    """The AP_WIDTH fields of ``ap`` (see the module docstring)."""
    t = ap.tensor
    item = t.dtype.itemsize
    if t.memory is Memory.HBM:
        start = ap.offset * item
        pitch = ap.pattern[0][0] * item
    else:
        free = t.free_size
        row0, col0 = divmod(ap.offset, free)
        pitch = pitch_of_memory[t.memory]
        start = row0 * pitch + col0 * item
    fields = [t.id, int(t.dtype), start, pitch, ap.partitions]
    dims = list(ap.pattern[1:])
    dims += [(0, 1)] * (MAX_FREE_DIMS - len(dims))
    for step, num in dims:
        fields += [step, num]
    return fields


def empty_ap_fields() -> list[int]:
    return [0, 0, 0, 0, 0] + [0, 1] * MAX_FREE_DIMS


# ---------------------------------------------------------------- Numba side (trusted inputs)

@njit(cache=True, inline="always")
def ap_parts(row, at):
    return row[at + F_PARTS]


@njit(cache=True, inline="always")
def ap_free(row, at):
    n = 1
    for d in range(MAX_FREE_DIMS):
        n *= row[at + F_DIMS + 2 * d + 1]
    return n


@njit(cache=True)
def _element_addresses(row, at, bases):
    """Byte addresses [P, N] of an encoded AP, in row-major free order."""
    parts = row[at + F_PARTS]
    item = _ITEMSIZE[row[at + F_DTYPE]]
    base = bases[row[at + F_TENSOR]] + row[at + F_START]
    pitch = row[at + F_PITCH]
    s1, n1 = row[at + 5] * item, row[at + 6]
    s2, n2 = row[at + 7] * item, row[at + 8]
    s3, n3 = row[at + 9] * item, row[at + 10]
    s4, n4 = row[at + 11] * item, row[at + 12]
    out = np.empty((parts, n1 * n2 * n3 * n4), dtype=np.int64)
    for p in range(parts):
        j = 0
        a_p = base + p * pitch
        for i1 in range(n1):
            a1 = a_p + i1 * s1
            for i2 in range(n2):
                a2 = a1 + i2 * s2
                for i3 in range(n3):
                    a3 = a2 + i3 * s3
                    for i4 in range(n4):
                        out[p, j] = a3 + i4 * s4
                        j += 1
    return out


@njit(cache=True)
def gather_f32(row, at, bases):
    code = row[at + F_DTYPE]
    addrs = _element_addresses(row, at, bases)
    out = np.empty(addrs.shape, dtype=np.float32)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            out[p, j] = load_f32(addrs[p, j], code)
    return out


@njit(cache=True)
def scatter_f32(row, at, bases, values):
    code = row[at + F_DTYPE]
    addrs = _element_addresses(row, at, bases)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            store_f32(addrs[p, j], code, values[p, j])


@njit(cache=True)
def gather_i64(row, at, bases):
    code = row[at + F_DTYPE]
    addrs = _element_addresses(row, at, bases)
    out = np.empty(addrs.shape, dtype=np.int64)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            out[p, j] = load_i64(addrs[p, j], code)
    return out


@njit(cache=True)
def scatter_i64(row, at, bases, values):
    code = row[at + F_DTYPE]
    addrs = _element_addresses(row, at, bases)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            store_i64(addrs[p, j], code, values[p, j])


@njit(cache=True)
def gather_raw(row, at, bases):
    """Element bit patterns [P, N] (as unsigned ints), for bit-exact moves."""
    raw = _RAW_CODES[row[at + F_DTYPE]]
    addrs = _element_addresses(row, at, bases)
    out = np.empty(addrs.shape, dtype=np.int64)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            out[p, j] = load_i64(addrs[p, j], raw)
    return out


@njit(cache=True)
def scatter_raw(row, at, bases, values):
    raw = _RAW_CODES[row[at + F_DTYPE]]
    addrs = _element_addresses(row, at, bases)
    for p in range(addrs.shape[0]):
        for j in range(addrs.shape[1]):
            store_i64(addrs[p, j], raw, values[p, j])


@njit(cache=True)
def copy_raw(row, dst_at, src_at, bases):
    """Bit-exact copy of element k of src to element k of dst (row-major), same dtype."""
    raw = _RAW_CODES[row[src_at + F_DTYPE]]
    src = _element_addresses(row, src_at, bases).ravel()
    dst = _element_addresses(row, dst_at, bases).ravel()
    for k in range(src.size):
        store_i64(dst[k], raw, load_i64(src[k], raw))


# ---------------------------------------------------------------- reference side (numpy, for clarity)

class RefMemory:
    """Byte buffers by tensor id; reads and writes access patterns with numpy fancy indexing."""

    def __init__(self, buffers: list[np.ndarray], base_offsets: list[int], pitch_of_memory: dict[Memory, int]):
        self.buffers = buffers  # flat uint8 views: HBM arrays, or the whole SBUF / PSUM
        self.base_offsets = base_offsets
        self.pitch_of_memory = pitch_of_memory

    def byte_addresses(self, ap: AccessPattern) -> np.ndarray:
        """Byte offsets [P, N] of every element of ``ap`` in its tensor's buffer."""
        f = encode_ap(ap, self.pitch_of_memory)
        item = ap.dtype.itemsize
        idx = np.zeros((1,), dtype=np.int64)
        for d in range(MAX_FREE_DIMS):
            step, num = f[F_DIMS + 2 * d], f[F_DIMS + 2 * d + 1]
            idx = (idx[:, None] + np.arange(num, dtype=np.int64)[None, :] * step * item).reshape(-1)
        parts = np.arange(f[F_PARTS], dtype=np.int64) * f[F_PITCH]
        return self.base_offsets[ap.tensor.id] + f[F_START] + parts[:, None] + idx[None, :]

    def read_raw(self, ap: AccessPattern) -> np.ndarray:
        """Element values [P, N] in the tensor's host dtype, bits untouched."""
        addrs = self.byte_addresses(ap)
        item = ap.dtype.itemsize
        byte_idx = addrs[..., None] + np.arange(item)
        raw = self.buffers[ap.tensor.id][byte_idx]  # [P, N, item] uint8
        return raw.reshape(-1).view(ap.dtype.numpy).reshape(addrs.shape)

    def write_raw(self, ap: AccessPattern, typed: np.ndarray) -> None:
        """Store host-dtype values [P, N] bit for bit."""
        addrs = self.byte_addresses(ap)
        item = ap.dtype.itemsize
        raw = np.ascontiguousarray(typed.astype(ap.dtype.numpy, copy=False)).reshape(-1).view(np.uint8)
        byte_idx = (addrs[..., None] + np.arange(item)).reshape(-1)
        self.buffers[ap.tensor.id][byte_idx] = raw

    def read(self, ap: AccessPattern) -> np.ndarray:
        """float32 [P, N] values."""
        return decode(self.read_raw(ap), int(ap.dtype))

    def write(self, ap: AccessPattern, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float32).reshape(ap.partitions, ap.free_size)
        self.write_raw(ap, encode(values, int(ap.dtype)))

    def read_int(self, ap: AccessPattern) -> np.ndarray:
        return self.read_raw(ap).astype(np.int64)

    def write_int(self, ap: AccessPattern, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64).reshape(ap.partitions, ap.free_size)
        self.write_raw(ap, encode_int(values, int(ap.dtype)))

    def copy(self, dst: AccessPattern, src: AccessPattern) -> None:
        """Bit-exact copy (same dtype), element i of src to element i of dst in row-major order."""
        self.write_raw(dst, self.read_raw(src).reshape(dst.partitions, dst.free_size))
