"""One NeuronCore's memories at run time: SBUF and PSUM byte arrays, and HBM bound to host arrays.

HBM tensors are the caller's numpy arrays, used in place (a torch tensor's memory can be handed
in zero-copy). SBUF and PSUM are ``[partitions, bytes_per_partition]`` uint8 arrays (views of
rows padded to :func:`host_pitch`) kept per chip and reused, because allocating 28 MiB per kernel
would dominate small kernels; before each run only the bytes the Program uses are reset to the
uninitialized-memory fill.
"""

from __future__ import annotations

import threading

import numpy as np

from neuronsim.errors import InputError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Memory, Program, TensorDecl
from neuronsim.sim.memory.layout import Placement

# 0xFF bytes are a NaN in every float format and -1 in every signed int (S30: AWS's simulator
# fills new tensors with NaN to expose uninitialized reads).
FILL_BYTE = {"nan": 0xFF, "zero": 0x00, "error": 0xFF}


_CACHE_LINE = 64


def host_pitch(bytes_per_partition: int) -> int:
    """Bytes from one partition to the next in the host arrays: the partition's bytes rounded up to
    a cache line, plus one. PSUM's 16 KiB (and SBUF's 4 KiB - 8) would put every partition's same
    column in the same L1 sets, and a matmul touching 128 partitions would thrash them."""
    return -(-bytes_per_partition // _CACHE_LINE) * _CACHE_LINE + _CACHE_LINE


def host_pitches(chip: ChipSpec) -> dict[Memory, int]:
    return {Memory.SBUF: host_pitch(chip.sbuf_bytes_per_partition),
            Memory.PSUM: host_pitch(chip.psum_bytes_per_partition)}


_ROW_ALIGNMENT = 4096


def _zeroed_rows(partitions: int, pitch: int) -> np.ndarray:
    """A zeroed ``[partitions, pitch]`` uint8 array whose rows start on cache-line (page) boundaries.
    A plain ``np.zeros`` of this size starts 16 bytes past a page, so every 64-byte vector an
    engine loads from a row would straddle two cache lines; a matmul on SBUF rows ran 1.4x slower."""
    flat = np.zeros(partitions * pitch + _ROW_ALIGNMENT, dtype=np.uint8)
    start = -flat.ctypes.data % _ROW_ALIGNMENT
    return flat[start:start + partitions * pitch].reshape(partitions, pitch)


class CoreMemory:
    def __init__(self, chip: ChipSpec):
        self.chip = chip
        self.pitch = host_pitches(chip)
        # Rows padded to the host pitch; ``sbuf`` / ``psum`` are views of the chip's bytes.
        self._rows = {m: _zeroed_rows(chip.partitions, self.pitch[m]) for m in self.pitch}
        self.sbuf = self._rows[Memory.SBUF][:, :chip.sbuf_bytes_per_partition]
        self.psum = self._rows[Memory.PSUM][:, :chip.psum_bytes_per_partition]

    def reset(self, program: Program, placement: Placement, policy: str, keep=frozenset()) -> None:
        """Fill the bytes of ``program``'s on-chip tensors, except those named in ``keep`` (tiles
        that carry their values over from an earlier phase of the same kernel on this core)."""
        fill = FILL_BYTE[policy]
        # A new tile may share bytes with a kept one (the allocator reuses bytes between lifetimes,
        # and a kernel's own addresses may do the same): those bytes keep the kept tile's values.
        kept = [(block, block.copy()) for block in
                (self._block(t, placement) for t in program.tensors
                 if t.memory is not Memory.HBM and t.name in keep)]
        for t in program.tensors:
            if t.memory is Memory.HBM or t.name in keep:
                continue
            self._block(t, placement)[...] = fill
        for block, values in kept:
            block[...] = values

    def _block(self, t: TensorDecl, placement: Placement) -> np.ndarray:
        """``t``'s bytes: a view of its partitions' rows."""
        mem = self.sbuf if t.memory is Memory.SBUF else self.psum
        start, off = placement.start_partition[t.id], placement.byte_offset[t.id]
        return mem[start:start + t.partitions, off:off + t.bytes_per_partition]

    def on_chip_base(self, t: TensorDecl, placement: Placement) -> tuple[np.ndarray, int]:
        """The flat host buffer of ``t``'s memory and ``t``'s byte offset in it."""
        rows = self._rows[t.memory]
        offset = placement.start_partition[t.id] * rows.shape[1] + placement.byte_offset[t.id]
        return rows.reshape(-1), offset

    def on_chip_address(self, t: TensorDecl, placement: Placement) -> int:
        """The host address of ``t``'s first byte (the Numba executor's base of ``t``)."""
        buf, offset = self.on_chip_base(t, placement)
        return buf.ctypes.data + offset

    def executor_bases(self, program: Program, placement: Placement,
                       hbm: dict[int, np.ndarray], registers: int | None = None) -> np.ndarray:
        """The Numba executor's base address of every tensor of ``program``: on-chip tensors from the
        placement, HBM tensors from ``hbm`` (by tensor id; 0 for any the caller fills in per call).
        With ``registers`` (a Program with control instructions), the registers and the pending-jump
        slot follow, zeroed (``engines/control.py``)."""
        extra = 0 if registers is None else registers + 1
        bases = np.zeros(len(program.tensors) + extra + 1, dtype=np.int64)  # + the executor's status slot
        for t in program.tensors:
            if t.memory is not Memory.HBM:
                bases[t.id] = self.on_chip_address(t, placement)
            elif t.id in hbm:
                bases[t.id] = hbm[t.id].ctypes.data
        return bases


_per_thread = threading.local()


def core_memory(chip: ChipSpec) -> CoreMemory:
    """The calling thread's core memory for ``chip`` (threads model separate cores, e.g. LNC=2)."""
    cache = getattr(_per_thread, "cores", None)
    if cache is None:
        cache = _per_thread.cores = {}
    mem = cache.get(chip.name)
    if mem is None or mem.chip is not chip:
        mem = cache[chip.name] = CoreMemory(chip)
    return mem


def bind_hbm(program: Program, arrays) -> dict[int, np.ndarray]:
    """Host arrays for every HBM tensor: the caller's (checked), or new zeroed ones.

    ``arrays`` is a mapping by tensor name or a sequence in the order of ``program.hbm_tensors()``
    (inputs and outputs alike; outputs and scratch may be omitted from a mapping).
    """
    hbm = program.hbm_tensors()
    if arrays is None:
        arrays = {}
    if not isinstance(arrays, dict):
        arrays = list(arrays)
        if len(arrays) > len(hbm):
            raise InputError(f"program '{program.name}' has {len(hbm)} HBM tensors, got {len(arrays)} arrays")
        arrays = {t.name: a for t, a in zip(hbm, arrays, strict=False)}  # may be shorter
    unknown = set(arrays) - {t.name for t in hbm}
    if unknown:
        raise InputError(f"program '{program.name}' has no HBM tensor named {sorted(unknown)}")
    bound: dict[int, np.ndarray] = {}
    for t in hbm:
        if t.alias_of is not None:  # the aliased tensor's bytes (validated: an earlier, larger one)
            raw = bound[t.alias_of].reshape(-1).view(np.uint8)[:t.nbytes]
            bound[t.id] = raw.view(t.dtype.numpy).reshape(t.shape)
            continue
        a = arrays.get(t.name)
        if a is None:
            if t.kind in ("input", "inout"):
                raise InputError(f"program '{program.name}': no array given for input {t.describe()}")
            bound[t.id] = np.zeros(t.shape, dtype=t.dtype.numpy)
            continue
        bound[t.id] = check_array(t, a)
    return bound


def check_array(t: TensorDecl, a) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise InputError(f"{t.describe()}: expected a numpy array, got {type(a).__name__}")
    expected = np.dtype(np.float32) if t.dtype is DType.tfloat32 else t.dtype.numpy
    if a.dtype != expected:
        raise InputError(f"{t.describe()}: array dtype is {a.dtype}, expected {expected}")
    if a.size != t.num_elements:
        raise InputError(f"{t.describe()}: array has shape {a.shape} ({a.size} elements), "
                         f"expected {t.num_elements} elements")
    if not a.flags.c_contiguous:
        raise InputError(f"{t.describe()}: array must be C-contiguous (HBM tensors are row-major buffers)")
    if not a.flags.writeable and t.kind in ("output", "inout", "scratch"):
        raise InputError(f"{t.describe()}: array is read-only but the program writes it")
    return a
