"""DMA compute: dma_compute without indirect access — checks and semantics (numpy reference and Numba);
its time is a transfer's, charged by the scheduler (``dma.py``).

S16: ``dst = srcs[0] + srcs[1] + ...`` element by element (element ``i`` of each operand in its
row-major order, like ``dma_copy``), computed in fp32 inside the DMA engine (each source cast to fp32,
the sum rounded to dst's dtype once). Only ``add`` with all scales 1.0 exists, so the instruction has
no immediates beyond the DMA trigger's. The sum runs left to right in both executors. The IR takes 1
to 4 sources (the encoded row's operand slots); the frontend chains longer lists through dst.

Cost (assumed): the engine streams every source, so a transfer of ``max(dst bytes, sum of source
bytes)`` (``dma.transfer_bytes``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.encoding import DST, MAX_SRCS, SRC_SLOTS
from neuronsim.sim.engines.common import OpDef, fail, no_immediates, require
from neuronsim.sim.engines.dma import _check_trigger
from neuronsim.sim.ir import Instruction, Memory, Opcode
from neuronsim.sim.memory.access import ap_parts, gather_f32, scatter_f32
from neuronsim.sim.memory.reference import RefMemory


def _check_compute(ins: Instruction, chip: ChipSpec) -> None:
    require(1 <= len(ins.srcs) <= MAX_SRCS, ins, f"takes 1 to {MAX_SRCS} sources, got {len(ins.srcs)}")
    require(ins.dst is not None, ins, "needs a destination")
    _check_trigger(ins)
    for k, src in enumerate(ins.srcs):
        require(src.num_elements == ins.dst.num_elements, ins,
                f"srcs[{k}] has {src.num_elements} elements but dst has {ins.dst.num_elements}; counts must "
                f"match ({src.describe()} -> {ins.dst.describe()})")
        if src.memory is Memory.PSUM:
            raise fail(ins, f"srcs[{k}] {src.describe()} is in PSUM; DMA reads HBM and SBUF")


def _no_cycles(ins: Instruction, chip: ChipSpec) -> float:
    return 0.0  # DMA time is piece_ns and the latencies, charged by the scheduler


def _ref_compute(ins: Instruction, mem: RefMemory) -> None:
    total = mem.read(ins.srcs[0]).reshape(-1)
    for src in ins.srcs[1:]:
        total = (total + mem.read(src).reshape(-1)).astype(np.float32)
    mem.write(ins.dst, total.reshape(ins.dst.partitions, ins.dst.free_size))


@njit(cache=True)
def _nb_compute(row, frow, bases):
    total = gather_f32(row, SRC_SLOTS[0], bases).ravel().copy()
    for k in range(1, len(SRC_SLOTS)):
        slot = SRC_SLOTS[k]
        if ap_parts(row, slot) == 0:
            break
        total += gather_f32(row, slot, bases).ravel()
    parts = ap_parts(row, DST)
    scatter_f32(row, DST, bases, total.reshape(parts, total.size // parts))


OPS = [OpDef(Opcode.DMA_COMPUTE, _check_compute, _no_cycles, _ref_compute, no_immediates, _nb_compute)]
