"""The rules a Program obeys before any executor sees it.

Generic rules (access patterns in bounds, partition limits, which engine may touch which memory)
are here; opcode-specific rules are each engine's ``check``. Executors assume a valid Program, so
nothing unchecked reaches Numba. Every rule raises a typed ``neuronsim.errors`` exception naming
the instruction and its source line.
"""

from __future__ import annotations

import numpy as np

from neuronsim.errors import ConstraintError, EngineAccessError, OutOfBoundsError, UninitializedReadError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.common import fail
from neuronsim.sim.ir import (
    MATMUL_OPS,
    MAX_FREE_DIMS,
    OPCODE_ENGINES,
    AccessPattern,
    Engine,
    Instruction,
    Memory,
    Opcode,
    Program,
)
from neuronsim.sim.memory.layout import Placement

# Which memories each engine may read and write (S9, S10: TensorE reads SBUF and writes PSUM;
# VectorE/ScalarE read/write SBUF and PSUM; GpSimd SBUF only; DMA moves HBM and SBUF).
ENGINE_READS = {
    Engine.TENSOR: {Memory.SBUF},
    Engine.VECTOR: {Memory.SBUF, Memory.PSUM},
    Engine.SCALAR: {Memory.SBUF, Memory.PSUM},
    Engine.GPSIMD: {Memory.SBUF},
    Engine.DMA: {Memory.HBM, Memory.SBUF},
    Engine.SYNC: {Memory.HBM, Memory.SBUF},  # a sequencer's register load / store (S16 register_load)
}
ENGINE_WRITES = {
    Engine.TENSOR: {Memory.PSUM},
    Engine.VECTOR: {Memory.SBUF, Memory.PSUM},
    Engine.SCALAR: {Memory.SBUF, Memory.PSUM},
    Engine.GPSIMD: {Memory.SBUF},
    Engine.DMA: {Memory.HBM, Memory.SBUF},
    Engine.SYNC: {Memory.HBM, Memory.SBUF},
}


def validate_program(program: Program, chip: ChipSpec, placement: Placement) -> None:
    ids = {id(t) for t in program.tensors}
    for t in program.tensors:
        if t.alias_of is not None:
            root = program.tensors[t.alias_of] if 0 <= t.alias_of < t.id else None
            if root is None or root.memory is not Memory.HBM or t.memory is not Memory.HBM \
                    or root.alias_of is not None or t.nbytes > root.nbytes:
                raise ConstraintError(f"tensor '{t.name}' aliases tensor {t.alias_of}: an alias is an HBM "
                                      f"tensor over the bytes of an earlier, unaliased HBM tensor at least "
                                      f"as large")
        if program.tensors[t.id] is not t:
            raise ConstraintError(f"tensor '{t.name}' has id {t.id} but is not at that position in "
                                  f"program '{program.name}'", location=t.location)
    for ins in program.instructions:
        validate_instruction(ins, chip, placement, ids)
        if ins.opcode is Opcode.BRANCH and ins.imm["target"] > len(program.instructions):
            raise fail(ins, f"branches to instruction {ins.imm['target']}; program '{program.name}' has "
                       f"{len(program.instructions)}")


def validate_instruction(ins: Instruction, chip: ChipSpec, placement: Placement,
                         tensor_ids: set[int]) -> None:
    if ins.engine not in OPCODE_ENGINES[ins.opcode]:
        allowed = ", ".join(e.name.lower() for e in OPCODE_ENGINES[ins.opcode])
        raise fail(ins, f"cannot run on {ins.engine.name.lower()}; allowed engines: {allowed}")
    opdef = OPDEFS.get(ins.opcode)
    if opdef is None:
        raise fail(ins, "has no implementation in this simulator")
    for ap, is_write in ins.accesses():
        if id(ap.tensor) not in tensor_ids:
            raise fail(ins, f"uses {ap.tensor.describe()}, which is not a tensor of this program")
        _check_engine_access(ins, ap, is_write)
        _check_bounds(ins, ap, chip)
        if ins.engine not in (Engine.DMA, Engine.SYNC):  # the sequencer reads one word, not lanes
            _check_start_partition(ins, ap, placement)
    if ins.engine is Engine.DMA and not 0 <= ins.queue < chip.dma_queues_per_engine:
        raise fail(ins, f"DMA queue {ins.queue} does not exist; "
                   f"queues are 0..{chip.dma_queues_per_engine - 1}")
    opdef.check(ins, chip)


def _check_engine_access(ins: Instruction, ap: AccessPattern, is_write: bool) -> None:
    if not is_write and ap is ins.dst and ins.opcode in MATMUL_OPS:
        return  # accumulation is PSUM's near-memory read-add-write, not a TensorE read (S9)
    allowed = (ENGINE_WRITES if is_write else ENGINE_READS)[ins.engine]
    if ap.memory not in allowed:
        verb = "write" if is_write else "read"
        names = ", ".join(sorted(m.name for m in allowed))
        raise fail(ins, f"{ins.engine.name.lower()} engine cannot {verb} {ap.memory.name} "
                   f"({ap.describe()}); it can {verb} {names}", EngineAccessError)


def _free_extent(ap: AccessPattern) -> tuple[int, int]:
    """Smallest and largest free-dim element offset the AP reaches (relative to its start)."""
    lo = hi = 0
    for step, num in ap.free_dims:
        reach = step * (num - 1)
        lo += min(0, reach)
        hi += max(0, reach)
    return lo, hi


def _check_bounds(ins: Instruction, ap: AccessPattern, chip: ChipSpec) -> None:
    t = ap.tensor
    if not ap.pattern or len(ap.pattern) - 1 > MAX_FREE_DIMS:
        raise fail(ins, f"{ap.describe()} has {len(ap.pattern) - 1} free dims; access patterns have 1 to "
                   f"{MAX_FREE_DIMS}")
    for _, num in ap.pattern:
        if num < 1:
            raise fail(ins, f"{ap.describe()} has a dimension of size {num}")
    lo, hi = _free_extent(ap)
    if t.memory is Memory.HBM:
        p_step, p_num = ap.pattern[0]
        p_reach = p_step * (p_num - 1)
        first = ap.offset + min(0, p_reach) + lo
        last = ap.offset + max(0, p_reach) + hi
        if first < 0 or last >= t.num_elements:
            raise fail(ins, f"{ap.describe()} reaches elements {first}..{last} of {t.describe()}, which has "
                       f"{t.num_elements}", OutOfBoundsError)
        return
    if ap.partitions > chip.partitions:
        raise fail(ins, f"{ap.describe()} spans {ap.partitions} partitions; the limit is {chip.partitions}")
    free = t.free_size
    if ap.pattern[0][0] != free and ap.partitions > 1:
        raise fail(ins, f"{ap.describe()}: the partition step must equal the tensor's free size {free} "
                   f"({t.memory.name} has no partition stride)")
    row0, col0 = divmod(ap.offset, free)
    if ap.offset < 0 or row0 + ap.partitions > t.partitions:
        raise fail(ins, f"{ap.describe()} reaches partitions {row0}..{row0 + ap.partitions - 1} of "
                   f"{t.describe()}, which has {t.partitions}", OutOfBoundsError)
    if col0 + lo < 0 or col0 + hi >= free:
        raise fail(ins, f"{ap.describe()} reaches free elements {col0 + lo}..{col0 + hi} of {t.describe()}, "
                   f"which has {free} per partition", OutOfBoundsError)


def _check_start_partition(ins: Instruction, ap: AccessPattern, placement: Placement) -> None:
    """S9: P in (64, 128] starts at 0; (32, 64] at 0 or 64; <= 32 at a multiple of 32."""
    if ap.memory is Memory.HBM:
        return
    start = placement.start_partition[ap.tensor.id] + ap.start_partition
    p = ap.partitions
    quantum = 128 if p > 64 else 64 if p > 32 else 32
    if start % quantum:
        raise fail(ins, f"{ap.describe()} starts at partition {start} with {p} partitions; an access of "
                   f"{p} partitions must start at a multiple of {quantum}")


def check_initialized(program: Program, placement: Placement, chip: ChipSpec, keep=frozenset()) -> None:
    """Raise on any read of SBUF/PSUM bytes that no earlier instruction wrote (static: APs are fixed).
    Tensors named in ``keep`` hold values from an earlier phase and count as written."""
    from neuronsim.sim.memory.reference import RefMemory

    pitch = {Memory.SBUF: chip.sbuf_bytes_per_partition, Memory.PSUM: chip.psum_bytes_per_partition}
    written = {m: np.zeros(chip.partitions * pitch[m], dtype=np.bool_) for m in (Memory.SBUF, Memory.PSUM)}
    offsets = [0] * len(program.tensors)
    for t in program.tensors:
        if t.memory is not Memory.HBM:
            offsets[t.id] = placement.start_partition[t.id] * pitch[t.memory] + placement.byte_offset[t.id]
    mem = RefMemory([np.empty(0, np.uint8)] * len(program.tensors), offsets, pitch)
    for t in program.tensors:
        if t.name in keep and t.memory is not Memory.HBM:
            addrs = mem.byte_addresses(t.ap())
            written[t.memory][(addrs[..., None] + np.arange(t.dtype.itemsize)).reshape(-1)] = True
    for ins in program.instructions:
        touched = OPDEFS[ins.opcode].touched
        for ap, is_write in (touched(ins) if touched else ins.accesses()):
            if ap.memory is Memory.HBM:
                continue
            addrs = mem.byte_addresses(ap)
            byte_idx = (addrs[..., None] + np.arange(ap.dtype.itemsize)).reshape(-1)
            if is_write:
                written[ap.memory][byte_idx] = True
            elif not written[ap.memory][byte_idx].all():
                raise fail(ins, f"reads {ap.describe()} before anything wrote all of it",
                           UninitializedReadError)
