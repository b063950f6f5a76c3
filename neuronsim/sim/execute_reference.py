"""The reference executor: the readable definition of the IR, one engine ``reference`` per step.

The Numba executor must match it bit for bit (tests/sim/test_executors.py fuzzes both).
"""

from __future__ import annotations

from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.ir import Program
from neuronsim.sim.memory.reference import RefMemory


def execute(program: Program, mem: RefMemory) -> None:
    for ins in program.instructions:
        OPDEFS[ins.opcode].reference(ins, mem)
