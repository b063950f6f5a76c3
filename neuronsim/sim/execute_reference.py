"""The reference executor: the readable definition of the IR, one engine ``reference`` per step.

Instructions run in order from the first; a ``BRANCH`` taken goes on at its target. The Numba
executor must match it bit for bit, path included (tests/sim/test_executors.py fuzzes both).
"""

from __future__ import annotations

from neuronsim.errors import ConstraintError
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.control import register_count
from neuronsim.sim.ir import Program
from neuronsim.sim.memory.reference import RefMemory

# Jumps one run may take before it is stopped as a loop that does not end (a while loop whose
# register never becomes 0).
MAX_JUMPS = 1 << 20


def execute(program: Program, mem: RefMemory) -> list[tuple[int, int]]:
    """Run ``program``; the jumps taken, as (branch index, target) in order."""
    mem.registers = [0] * register_count(program.instructions)
    jumps: list[tuple[int, int]] = []
    instructions = program.instructions
    pc = 0
    while pc < len(instructions):
        ins = instructions[pc]
        OPDEFS[ins.opcode].reference(ins, mem)
        if mem.jump is None:
            pc += 1
            continue
        jumps.append((pc, mem.jump))
        if len(jumps) > MAX_JUMPS:
            raise endless_loop(ins)
        pc, mem.jump = mem.jump, None
    return jumps


def endless_loop(ins) -> ConstraintError:
    return ConstraintError(f"the program took more than {MAX_JUMPS} branches: a dynamic loop that does not end "
                           f"(a while loop whose register never becomes 0?)", instruction=ins.describe(),
                           location=ins.location)
