"""The simulator's front door: ``prepare`` a Program once, ``run`` it on arrays many times.

``prepare`` places on-chip tensors, validates every instruction, encodes the Program for the
Numba executor and schedules it (timing is data-independent). The result is cached per Program,
chip and uninitialized-memory policy, so running a Program again costs only the execution.

A Program with branches (dynamic loops on registers, ``engines/control.py``) runs a path that
depends on the data: its schedule is made after the run, for the instructions in the order they
ran, and cached per path (DESIGN decision 4). ``RunResult.prepared`` is then that path's: its
``program`` lists the instructions as they ran, which its ``timeline`` indexes.

A ``CORE_BARRIER`` pauses a run (the cores of an LNC=2 launch meet there): ``RunResult.paused``
says where, with the registers, and ``run(..., resume=result.paused)`` goes on after it on the same
core memory. Each piece is a path of its own, scheduled from where it started to where it paused.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from neuronsim.options import current as current_options
from neuronsim.sim import execute_numba, execute_reference
from neuronsim.sim.chips import ChipSpec, get_chip
from neuronsim.sim.encoding import encode_instruction, encode_rows
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.control import REG0_FROM_END, STATUS_PAUSED, register_count
from neuronsim.sim.ir import Memory, Program
from neuronsim.sim.memory.layout import Placement, place_tensors
from neuronsim.sim.memory.reference import RefMemory
from neuronsim.sim.memory.state import CoreMemory, bind_hbm, core_memory, host_pitches
from neuronsim.sim.schedule import Timeline, schedule_program
from neuronsim.sim.validate import check_initialized, validate_program


@dataclass(frozen=True)
class Prepared:
    program: Program
    chip: ChipSpec
    placement: Placement
    timeline: Timeline
    itab: np.ndarray
    ftab: np.ndarray
    registers: int | None = None  # a Program with control instructions: its register count
    paths: dict = field(default_factory=dict, compare=False)  # jumps taken -> that path's Prepared


@dataclass(frozen=True)
class Paused:
    """Where a run paused: the CORE_BARRIER's index and number, and the registers then."""

    at: int
    barrier: int
    registers: tuple[int, ...]


@dataclass(frozen=True)
class RunResult:
    outputs: dict[str, np.ndarray]  # HBM tensors of kind output / inout, by name
    timeline: Timeline
    prepared: Prepared
    paused: Paused | None = None  # the run stopped at a CORE_BARRIER: resume=paused goes on


MAX_PATHS = 64  # schedules kept per Program with branches (one per distinct path)
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def prepare(program: Program, chip: str | ChipSpec | None = None, *, uninitialized_memory: str | None = None,
            keep: frozenset = frozenset(), tiered: bool | None = None) -> Prepared:
    """``tiered``: schedule with the interpreted scheduler while its machine code compiles (default:
    when the executor option is ``tiered``)."""
    opts = current_options()
    spec = get_chip(opts.chip if chip is None else chip)
    policy = opts.uninitialized_memory if uninitialized_memory is None else uninitialized_memory
    key = (spec.name, id(spec), policy == "error", keep if policy == "error" else None)
    with _lock:
        per_program = _prepared.setdefault(program, {})
        hit = per_program.get(key)
    if hit is not None:
        return hit
    placement = place_tensors(program, spec)
    validate_program(program, spec, placement)
    if policy == "error":
        check_initialized(program, placement, spec, keep)
    pitch = host_pitches(spec)  # the executors address on-chip bytes in CoreMemory's host rows
    rows, frows = [], []
    for ins in program.instructions:
        ints, floats = OPDEFS[ins.opcode].encode(ins)
        row, frow = encode_instruction(ins, pitch, ints, floats)
        rows.append(row)
        frows.append(frow)
    itab, ftab = encode_rows(rows, frows)
    if tiered is None:
        tiered = opts.executor == "tiered"
    if program.has_control:  # scheduled per path, after each run (a path with no jump: this one)
        registers = register_count(program.instructions)
        timeline = None
    else:
        registers, timeline = None, schedule_program(program, spec, placement, tiered)
    prepared = Prepared(program, spec, placement, timeline, itab, ftab, registers)
    with _lock:
        per_program[key] = prepared
    return prepared


def run(program: Program, arrays=None, chip: str | ChipSpec | None = None, *, executor: str | None = None,
        uninitialized_memory: str | None = None, core: CoreMemory | None = None,
        keep: frozenset = frozenset(), resume: Paused | None = None) -> RunResult:
    """Run ``program`` on host arrays (HBM tensors, used in place) and return outputs + timeline.

    ``core`` is the physical core's SBUF/PSUM (default: the calling thread's); ``keep`` names the
    on-chip tensors whose bytes carry over from an earlier Program on that core (a kernel's phases).
    ``resume``: go on after the CORE_BARRIER an earlier run of ``program`` on ``core`` paused at
    (its on-chip bytes are all kept).
    """
    opts = current_options()
    policy = opts.uninitialized_memory if uninitialized_memory is None else uninitialized_memory
    which = opts.executor if executor is None else executor
    prep = prepare(program, chip, uninitialized_memory=policy, keep=keep, tiered=which == "tiered")
    hbm = bind_hbm(program, arrays)
    if core is None:
        core = core_memory(prep.chip)
    start, registers = (0, None) if resume is None else (resume.at + 1, list(resume.registers))
    if resume is None:
        core.reset(program, prep.placement, policy, keep)
    paused_at = -1
    if which == "reference":
        buffers, offsets = [], []
        for t in program.tensors:
            if t.memory is Memory.HBM:
                buffers.append(hbm[t.id].reshape(-1).view(np.uint8))
                offsets.append(0)
            else:
                buf, off = core.on_chip_base(t, prep.placement)
                buffers.append(buf)
                offsets.append(off)
        mem = RefMemory(buffers, offsets, core.pitch)
        jumps, paused_at = execute_reference.execute(program, mem, start, registers)
        registers = mem.registers
    elif prep.registers is not None:
        bases = core.executor_bases(program, prep.placement, hbm, prep.registers)
        for r, value in enumerate(registers or ()):
            bases[bases.size - REG0_FROM_END - r] = value
        tiered = program if which == "tiered" else None
        stopped, taken = execute_numba.execute_branching(prep.itab, prep.ftab, bases, tiered, core.pitch,
                                                         start)
        if stopped >= 0 and bases[-1] == STATUS_PAUSED:
            paused_at = stopped
        elif stopped >= 0:
            ins = program.instructions[stopped]
            if bases[-1] == execute_numba.STATUS_PATH_FULL:
                raise execute_reference.endless_loop(ins)
            raise execute_numba.stop_error(program, stopped, bases)
        jumps = [tuple(j) for j in taken.tolist()]
        registers = [int(bases[bases.size - REG0_FROM_END - r]) for r in range(prep.registers)]
    else:
        bases = core.executor_bases(program, prep.placement, hbm)
        tiered = program if which == "tiered" else None
        stopped = execute_numba.execute(prep.itab, prep.ftab, bases, tiered, core.pitch)
        if stopped >= 0:  # an indirect DMA's index out of bounds, or a kernel that raised
            raise execute_numba.stop_error(program, stopped, bases)
    paused = None
    if prep.registers is not None:
        end = len(program.instructions) if paused_at < 0 else paused_at
        prep = path_prepared(prep, jumps, tiered=which == "tiered", start=start, end=end)
        if paused_at >= 0:
            paused = Paused(paused_at, int(program.instructions[paused_at].imm.get("barrier", 0)),
                            tuple(registers))
    outputs = {t.name: hbm[t.id] for t in program.hbm_tensors() if t.kind in ("output", "inout")}
    return RunResult(outputs, prep.timeline, prep, paused)


def path_order(n: int, jumps, start: int = 0) -> np.ndarray:
    """Indices of the instructions in the order they ran from ``start`` up to ``n`` (exclusive),
    from the jumps taken (branch, target)."""
    pieces, pc = [], start
    for branch, target in jumps:
        pieces.append(np.arange(pc, branch + 1))
        pc = target
    pieces.append(np.arange(pc, n))
    return np.concatenate(pieces).astype(np.int64)


def path_prepared(prep: Prepared, jumps, tiered: bool = False, start: int = 0,
                  end: int | None = None) -> Prepared:
    """The Prepared of one path of a Program with branches: its instructions as they ran from
    ``start`` up to ``end`` (a CORE_BARRIER it paused at, not included; default: the end),
    scheduled (``tiered``: as ``prepare`` schedules)."""
    program = prep.program
    end = len(program.instructions) if end is None else end
    key = (start, end, *(tuple(int(v) for v in j) for j in jumps))
    with _lock:
        hit = prep.paths.get(key)
    if hit is not None:
        return hit
    order = path_order(end, key[2:], start)
    ran = Program(program.name, program.tensors, tuple(program.instructions[i] for i in order),
                  program.location)
    timeline = schedule_program(ran, prep.chip, prep.placement, tiered)
    hit = dataclasses.replace(prep, program=ran, timeline=timeline, paths={})
    with _lock:
        if len(prep.paths) < MAX_PATHS:
            prep.paths[key] = hit
    return hit
