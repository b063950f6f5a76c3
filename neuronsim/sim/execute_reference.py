"""The reference executor: the readable definition of the IR, one engine ``reference`` per step.

Instructions run in order from the first; a ``BRANCH`` taken goes on at its target; a
``CORE_BARRIER`` pauses the run, which a later call resumes after it. The Numba executor must match
it bit for bit, path and pauses included (tests/sim/test_executors.py fuzzes both).
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


def execute(program: Program, mem: RefMemory, start: int = 0,
            registers: list[int] | None = None) -> tuple[list[tuple[int, int]], int]:
    """Run ``program`` from instruction ``start`` (with ``registers``, default all 0); (the jumps
    taken, as (branch index, target) in order; -1, or the CORE_BARRIER the run paused at, whose
    registers are left in ``mem.registers``)."""
    mem.registers = list(registers) if registers is not None else [0] * register_count(program.instructions)
    jumps: list[tuple[int, int]] = []
    instructions = program.instructions
    pc = start
    while pc < len(instructions):
        ins = instructions[pc]
        OPDEFS[ins.opcode].reference(ins, mem)
        if mem.paused:
            mem.paused = False
            return jumps, pc
        if mem.jump is None:
            pc += 1
            continue
        jumps.append((pc, mem.jump))
        if len(jumps) > MAX_JUMPS:
            raise endless_loop(ins)
        pc, mem.jump = mem.jump, None
    return jumps, -1


def endless_loop(ins) -> ConstraintError:
    return ConstraintError(f"the program took more than {MAX_JUMPS} branches: a dynamic loop that "
                           f"does not end (a while loop whose register never becomes 0?)",
                           instruction=ins.describe(), location=ins.location)
