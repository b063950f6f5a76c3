"""VectorE cross-partition shuffle: nc_stream_shuffle — checks, semantics (numpy reference and Numba)
and cost side by side.

VectorE's reshape banks each cover a quadrant of 32 partitions and can route any of their 32 input
streams to each output stream (S9, the architecture guide's cross-partition data movement). The
instruction applies one 32-entry mask to every quadrant the access touches (S16): output partition
``q*32 + i`` (counted from dst's first partition) takes input partition ``q*32 + mask[i]`` (counted
from src's first partition); ``mask[i] == 255`` leaves that output partition unmodified. Values move
bit for bit (src and dst share a dtype) and src is read whole before dst is written, so an in-place
shuffle (dst the same tile as src) is allowed, as documented.

Cost (S23, trainium-hardware.md §2.8): ``max(MIN_II, N)`` VectorE cycles, N the elements per
partition, with the stride penalty of the elementwise family (``common.elementwise_cycles``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.encoding import DST, IMM, SRC0
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    require,
    require_free_limit,
    require_known_immediates,
    require_operands,
)
from neuronsim.sim.ir import QUADRANT, SHUFFLE_KEEP, Instruction, Opcode
from neuronsim.sim.memory.access import ap_free, ap_parts, gather_raw, scatter_raw
from neuronsim.sim.memory.reference import RefMemory

_MASK_PER_INT = 4  # mask entries packed per int immediate (8 immediates x 4 bytes = 32 entries)


def _check_shuffle(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"mask"}))
    require_operands(ins, 1)
    src, dst = ins.srcs[0], ins.dst
    mask = ins.imm.get("mask")
    require(isinstance(mask, (tuple, list)) and len(mask) == QUADRANT, ins,
            f"shuffle_mask must be a list of {QUADRANT} partition numbers; got {mask!r}")
    for i, m in enumerate(mask):
        require(isinstance(m, (int, np.integer)) and not isinstance(m, bool)
                and (0 <= m < QUADRANT or m == SHUFFLE_KEEP), ins,
                f"shuffle_mask[{i}] = {m!r}; each entry is a partition 0..{QUADRANT - 1} of the quadrant or "
                f"{SHUFFLE_KEEP} (leave the output partition unmodified)")
    if src.dtype is not dst.dtype:
        raise fail(ins, f"dst is {dst.dtype.name} but src is {src.dtype.name}; nc_stream_shuffle moves "
                   "one dtype", DtypeError)
    require(src.free_size == dst.free_size, ins, f"dst has {dst.free_size} elements per partition but src "
            f"has {src.free_size}; they must match")
    require_free_limit(ins, chip)
    for i in range(dst.partitions):
        m = mask[i % QUADRANT]
        want = (i // QUADRANT) * QUADRANT + m
        require(m == SHUFFLE_KEEP or want < src.partitions, ins,
                f"dst partition {i} takes src partition {want} (quadrant {i // QUADRANT}, shuffle_mask"
                f"[{i % QUADRANT}] = {m}) but src has {src.partitions} partitions")


def _cycles_shuffle(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``max(MIN_II, N)``, N = elements per partition (with the stride penalty)."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _ref_shuffle(ins: Instruction, mem: RefMemory) -> None:
    """dst[q*32 + i] = src[q*32 + mask[i]] for every dst partition whose mask entry is not 255."""
    mask, dst = ins.imm["mask"], ins.dst
    src = mem.read_raw(ins.srcs[0])
    out = mem.read_raw(dst) if ins.reads_dst() else np.empty((dst.partitions, dst.free_size), src.dtype)
    for i in range(dst.partitions):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP:
            out[i] = src[(i // QUADRANT) * QUADRANT + m]
    mem.write_raw(dst, out)


def _encode_shuffle(ins: Instruction) -> tuple[list[int], list[float]]:
    mask = [int(m) for m in ins.imm["mask"]]
    packed = [sum(mask[k + j] << (8 * j) for j in range(_MASK_PER_INT))
              for k in range(0, QUADRANT, _MASK_PER_INT)]
    return packed, []


@njit(cache=True)
def _nb_shuffle(row, frow, bases):
    src = gather_raw(row, SRC0, bases)
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    keeps = False
    for i in range(min(parts, 32)):
        if (row[IMM + i // 4] >> (8 * (i % 4))) & 0xFF == 255:
            keeps = True
    out = gather_raw(row, DST, bases) if keeps else np.empty((parts, n), dtype=np.int64)
    for i in range(parts):
        m = (row[IMM + (i % 32) // 4] >> (8 * (i % 4))) & 0xFF
        if m != 255:
            base = (i // 32) * 32 + m
            for j in range(n):
                out[i, j] = src[base, j]
    scatter_raw(row, DST, bases, out)


OPS = [OpDef(Opcode.NC_STREAM_SHUFFLE, _check_shuffle, _cycles_shuffle, _ref_shuffle, _encode_shuffle,
             _nb_shuffle)]
