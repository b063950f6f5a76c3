"""DMA: dma_copy and dma_transpose — checks, semantics and the transfer cost model.

Cost model (S14, S15, chip data): a transfer is split across the DMA engines by partition, each
engine serving ``partitions_per_dma_engine`` consecutive partitions of the SBUF side (HBM-only
transfers use the first engines). Every engine in use is busy for

    max(dma_fixed_cost_ns, bytes_on_that_engine / dma_engine_bandwidth)

— the ``t = max(t_fixed, bytes/BW)`` form that fits the published size/throughput figure: fixed
cost bound below ~2 KiB per partition, saturated from ~4 KiB. Transfers on one queue run in order;
an engine moves one transfer at a time (the scheduler enforces both). DMA transpose runs at the
documented fraction of copy throughput.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.encoding import DST, SRC0
from neuronsim.sim.engines.common import OpDef, fail, no_immediates, require, require_operands
from neuronsim.sim.ir import Instruction, Memory, Opcode
from neuronsim.sim.memory.access import F_DTYPE, F_PARTS, gather_f32, scatter_f32
from neuronsim.sim.memory.copy import copy_raw, transpose_raw
from neuronsim.sim.memory.reference import RefMemory


def transfer_engines(ins: Instruction, chip: ChipSpec, start_partition: int) -> tuple[int, int]:
    """(first DMA engine, engines used) for a transfer whose SBUF side starts at ``start_partition``."""
    per_engine = chip.partitions_per_dma_engine
    parts = ins.dst.partitions
    first = min(start_partition // per_engine, chip.dma_engines - 1)
    last = min((start_partition + parts - 1) // per_engine, chip.dma_engines - 1)
    return first, last - first + 1


def transfer_bytes(ins: Instruction) -> int:
    """Bytes moved: the wider side of a casting copy."""
    return max(ins.dst.nbytes, ins.srcs[0].nbytes)


def transfer_ns(ins: Instruction, chip: ChipSpec, engines_used: int) -> float:
    """Busy time of each engine in use: ``max(fixed, bytes_per_engine / bandwidth)``."""
    per_engine = math.ceil(ins.dst.partitions / engines_used)
    bytes_per_engine = transfer_bytes(ins) / ins.dst.partitions * per_engine
    bandwidth = chip.dma_engine_bandwidth_bytes_per_s
    if ins.opcode is Opcode.DMA_TRANSPOSE:
        on_chip_src = ins.srcs[0].memory is Memory.SBUF
        bandwidth *= chip.dma_transpose_sbuf_efficiency if on_chip_src else chip.dma_transpose_hbm_efficiency
    return max(chip.dma_fixed_cost_ns, bytes_per_engine / bandwidth * 1e9)


def _no_cycles(ins: Instruction, chip: ChipSpec) -> float:
    return 0.0  # DMA time is transfer_ns, charged by the scheduler on the DMA engines


# ---------------------------------------------------------------- dma_copy

def _check_copy(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 1)
    dst, src = ins.dst, ins.srcs[0]
    require(dst.num_elements == src.num_elements, ins,
            f"copies {src.num_elements} elements into {dst.num_elements}; element counts must match "
            f"({src.describe()} -> {dst.describe()})")
    if dst.memory is not Memory.HBM:
        require(dst.partitions == src.partitions or src.memory is Memory.HBM, ins,
                f"SBUF -> SBUF copy needs equal partition counts ({src.partitions} -> {dst.partitions})")


def _ref_copy(ins: Instruction, mem: RefMemory) -> None:
    dst, src = ins.dst, ins.srcs[0]
    if dst.dtype == src.dtype:
        mem.copy(dst, src)
    else:
        mem.write(dst, mem.read(src).reshape(dst.partitions, dst.free_size))


@njit(cache=True)
def _nb_copy(row, frow, bases):
    if row[DST + F_DTYPE] == row[SRC0 + F_DTYPE]:
        copy_raw(row, DST, SRC0, bases)
    else:
        values = gather_f32(row, SRC0, bases)
        scatter_f32(row, DST, bases, values.reshape(row[DST + F_PARTS], values.size // row[DST + F_PARTS]))


# ---------------------------------------------------------------- dma_transpose

def _check_transpose(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 1)
    dst, src = ins.dst, ins.srcs[0]
    require(dst.memory is Memory.SBUF, ins, f"writes {dst.describe()}; dma_transpose writes SBUF")
    if src.dtype != dst.dtype or src.dtype.itemsize not in (2, 4):
        raise fail(ins, f"transposes {src.dtype.name} into {dst.dtype.name}; dma_transpose needs one 2- or "
                   f"4-byte dtype on both sides", DtypeError)
    require(len(src.free_dims) == 1 and len(dst.free_dims) == 1, ins,
            "dma_transpose takes 2-D access patterns (axes (1, 0))")
    require(dst.partitions == src.free_size and dst.free_size == src.partitions, ins,
            f"transposes {src.partitions}x{src.free_size} into {dst.partitions}x{dst.free_size}")


def _ref_transpose(ins: Instruction, mem: RefMemory) -> None:
    mem.write_raw(ins.dst, np.ascontiguousarray(mem.read_raw(ins.srcs[0]).T))


@njit(cache=True)
def _nb_transpose(row, frow, bases):
    transpose_raw(row, DST, SRC0, bases)


OPS = [
    OpDef(Opcode.DMA_COPY, _check_copy, _no_cycles, _ref_copy, no_immediates, _nb_copy),
    OpDef(Opcode.DMA_TRANSPOSE, _check_transpose, _no_cycles, _ref_transpose, no_immediates, _nb_transpose),
]
