"""Placement of SBUF/PSUM tensors and the capacity limits of on-chip memory.

Tensors that arrive with an ``address`` (the NKI frontend's liveness allocator assigns them) are
checked against capacity; tensors without one get a bump allocation that never reuses bytes. An
SBUF/PSUM tensor occupies partitions ``[start, start + shape[0])`` and bytes
``[byte_offset, byte_offset + bytes_per_partition)`` of each.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuronsim.errors import ConstraintError, PsumCapacityError, SbufCapacityError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.ir import Memory, Program, TensorDecl


@dataclass(frozen=True)
class Placement:
    """Where each on-chip tensor lives: ``start_partition``, ``byte_offset`` by tensor id."""

    start_partition: tuple[int, ...]
    byte_offset: tuple[int, ...]
    sbuf_peak_bytes: int  # bytes per partition at the highest allocated address, times partitions used
    psum_peak_bytes: int


def capacity_bytes_per_partition(memory: Memory, chip: ChipSpec) -> int:
    return chip.sbuf_bytes_per_partition if memory is Memory.SBUF else chip.psum_bytes_per_partition


def _capacity_error(t: TensorDecl, end: int, limit: int) -> Exception:
    cls = SbufCapacityError if t.memory is Memory.SBUF else PsumCapacityError
    return cls(
        f"{t.describe()} needs {t.bytes_per_partition} bytes per partition; it would end at byte {end} "
        f"of a partition but {t.memory.name} has {limit} usable bytes per partition",
        instruction=f"allocation of '{t.name}'",
        location=t.location,
    )


def place_tensors(program: Program, chip: ChipSpec) -> Placement:
    starts = [0] * len(program.tensors)
    offsets = [0] * len(program.tensors)
    bump = {Memory.SBUF: 0, Memory.PSUM: 0}
    high = {Memory.SBUF: 0, Memory.PSUM: 0}
    for t in program.tensors:
        if t.memory is Memory.HBM:
            continue
        limit = capacity_bytes_per_partition(t.memory, chip)
        if len(t.shape) < 2 and t.memory is not Memory.HBM:
            raise ConstraintError(
                f"{t.describe()} must be at least 2-D with the partition dim first",
                instruction=f"allocation of '{t.name}'", location=t.location)
        if t.partitions > chip.partitions or t.partitions < 1:
            raise ConstraintError(
                f"{t.describe()} has {t.partitions} partitions; the limit is {chip.partitions}",
                instruction=f"allocation of '{t.name}'", location=t.location)
        if t.address is None:
            start, offset = 0, bump[t.memory]
            if t.memory is Memory.PSUM:
                # A PSUM tensor that fits in a bank must not straddle two (matmul accumulation
                # groups are per bank, S9).
                bank = chip.psum_bank_bytes_per_partition
                last_byte = offset + t.bytes_per_partition - 1
                if t.bytes_per_partition <= bank and offset // bank != last_byte // bank:
                    offset = (offset // bank + 1) * bank
            bump[t.memory] = offset + t.bytes_per_partition
        else:
            start, offset = t.address
            if start < 0 or offset < 0 or start + t.partitions > chip.partitions:
                raise ConstraintError(
                    f"{t.describe()} at partition {start} byte {offset} does not fit the "
                    f"{chip.partitions} partitions", instruction=f"allocation of '{t.name}'",
                    location=t.location)
        end = offset + t.bytes_per_partition
        if end > limit:
            raise _capacity_error(t, end, limit)
        starts[t.id], offsets[t.id] = start, offset
        high[t.memory] = max(high[t.memory], end)
    return Placement(tuple(starts), tuple(offsets), high[Memory.SBUF] * chip.partitions,
                     high[Memory.PSUM] * chip.partitions)
