"""The reference executor's memory: numpy byte buffers read and written through access patterns
— the Numba executor's loads and stores, in ``access.py``, must match it bit for bit.

An access pattern is a strided walk over bytes (partitions ``pitch`` apart, each free dim ``step``
elements apart), so it is read and written as a numpy view of its tensor's buffer with those
strides. A write through a pattern that reaches some byte twice (a step of 0, or dims that
interleave) goes element by element with fancy indexing instead, so the last write of a byte wins,
in the pattern's order, as in the kernels.
"""

from __future__ import annotations

import numpy as np

from neuronsim.sim.ir import MAX_FREE_DIMS, AccessPattern, Memory
from neuronsim.sim.memory.access import F_DIMS, F_PARTS, F_PITCH, F_START, encode_ap
from neuronsim.sim.memory.numerics import decode, encode, encode_int


class RefMemory:
    """Byte buffers by tensor id; reads and writes access patterns with numpy fancy indexing."""

    def __init__(self, buffers: list[np.ndarray], base_offsets: list[int],
                 pitch_of_memory: dict[Memory, int]):
        self.buffers = buffers  # flat uint8 views: HBM arrays, or the whole SBUF / PSUM
        self.base_offsets = base_offsets
        self.pitch_of_memory = pitch_of_memory
        self.registers: list[int] = []  # the sequencers' 32-bit registers (engines/control.py)
        self.jump: int | None = None  # a branch taken by the last instruction: its target
        self.paused = False  # the last instruction was a CORE_BARRIER (engines/control.py)

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

    def strided_view(self, ap: AccessPattern, writing: bool = False) -> np.ndarray | None:
        """``ap``'s elements as a view [P, *free dims] of raw unsigned words over its buffer; None
        when it is empty, out of the buffer (the fancy-indexing path raises then) or, for a write,
        when it reaches some byte twice."""
        f = encode_ap(ap, self.pitch_of_memory)
        item = ap.dtype.itemsize
        shape = [f[F_PARTS]] + [f[F_DIMS + 2 * d + 1] for d in range(MAX_FREE_DIMS)]
        strides = [f[F_PITCH]] + [f[F_DIMS + 2 * d] * item for d in range(MAX_FREE_DIMS)]
        if 0 in shape:
            return None
        offset = self.base_offsets[ap.tensor.id] + f[F_START]
        buffer = self.buffers[ap.tensor.id]
        low = offset + sum(min(0, s * (n - 1)) for s, n in zip(strides, shape, strict=True))
        high = offset + sum(max(0, s * (n - 1)) for s, n in zip(strides, shape, strict=True)) + item
        if low < 0 or high > buffer.size or (writing and _reaches_a_byte_twice(shape, strides, item)):
            return None
        return np.ndarray(shape, np.dtype(f"u{item}"), buffer, offset, strides)

    def read_raw(self, ap: AccessPattern) -> np.ndarray:
        """Element values [P, N] in the tensor's host dtype, bits untouched (a copy)."""
        view = self.strided_view(ap)
        if view is not None:
            return view.reshape(ap.partitions, -1).copy().view(ap.dtype.numpy)
        addrs = self.byte_addresses(ap)
        item = ap.dtype.itemsize
        byte_idx = addrs[..., None] + np.arange(item)
        raw = self.buffers[ap.tensor.id][byte_idx]  # [P, N, item] uint8
        return raw.reshape(-1).view(ap.dtype.numpy).reshape(addrs.shape)

    def write_raw(self, ap: AccessPattern, typed: np.ndarray) -> None:
        """Store host-dtype values [P, N] bit for bit."""
        item = ap.dtype.itemsize
        view = self.strided_view(ap, writing=True)
        if view is not None:
            words = np.ascontiguousarray(typed.astype(ap.dtype.numpy, copy=False)).view(np.dtype(f"u{item}"))
            view[...] = words.reshape(view.shape)
            return
        addrs = self.byte_addresses(ap)
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


def _reaches_a_byte_twice(shape: list[int], strides: list[int], item: int) -> bool:
    """Whether two elements of the strided walk share a byte: unless, taken from the smallest
    stride up, every dim's stride clears everything the smaller ones span."""
    span = item
    for stride, num in sorted(((abs(s), n) for s, n in zip(strides, shape, strict=True) if n > 1)):
        if stride < span:
            return True
        span += stride * (num - 1)
    return False
