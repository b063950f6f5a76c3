"""The sequencers' control instructions: 32-bit registers and branches (S9 "sequencers also run control
instructions: 32-bit scalar registers, branches"; S16 ``nisa.register_*``, ``nl.dynamic_range``).

Registers are numbered from 0 (the kernel's virtual registers; the NKI compiler maps them to each
engine sequencer's 64 physical ones). Every value is a 32-bit two's-complement integer: results wrap.

- ``REGISTER_MOVE``: ``reg[dst_reg] = (reg[src_reg] if src_reg >= 0 else 0) + value``.
- ``REGISTER_LOAD``: ``reg[dst_reg]`` = the one integer element of ``srcs[0]`` (SBUF or HBM).
- ``REGISTER_STORE``: the one int32/uint32 element ``dst`` = the bits of ``reg[src_reg]``.
- ``BRANCH``: go to instruction ``target`` when ``reg[reg] <cmp> rhs`` holds, ``rhs`` being
  ``reg[rhs_reg]`` (``rhs_reg >= 0``) or ``value``; ``cmp`` is ``always`` (an unconditional jump)
  or one of ``BRANCH_CMPS``. Execution goes on at the next instruction otherwise.
- ``CORE_BARRIER``: the run pauses here (``imm["barrier"]`` names the barrier: the launcher checks
  every core paused at the same one) and resumes at the next instruction with its registers and
  on-chip bytes as they were, once every core of the launch has reached it (``nki/launch.py``).
  A barrier in a loop on a register (a ``sendrecv`` there) is one: a loop cannot span Programs.

The executors hold the registers and the pending jump beside the tensors (Numba: in ``bases``, see
``register_slot``), and record each jump taken: a Program with branches has a schedule per path
(``sim/api.py``, DESIGN decision 4).

Costs: not published. Each instruction is charged ``sequencer_instruction_cycles`` and a register
load ``register_load_cycles`` (a memory read), both at the Sync engine's clock, on its stream.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0
from neuronsim.sim.engines.common import OpDef, fail, require, require_operands
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import F_DTYPE, gather_i64, scatter_i64
from neuronsim.sim.memory.reference import RefMemory

# Comparisons a branch can make, by code (the Numba row holds the code).
BRANCH_CMPS = ("always", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
STORE_DTYPES = ("int32", "uint32")
_INT32 = int(DType.int32)
# bases = [tensor bases..., reg[n-1], ..., reg[0], pending jump (target + 1, 0: none), status]
JUMP_FROM_END = 2
REG0_FROM_END = 3
# The status a CORE_BARRIER leaves in the executor's status slot: not an error, a pause.
STATUS_PAUSED = 4


def register_count(instructions) -> int:
    """How many registers a Program's instructions use (highest number + 1)."""
    n = 0
    for ins in instructions:
        if ins.opcode in REGISTER_FIELDS:
            for key in REGISTER_FIELDS[ins.opcode]:
                n = max(n, int(ins.imm.get(key, -1)) + 1)
    return n


REGISTER_FIELDS = {
    Opcode.REGISTER_MOVE: ("dst_reg", "src_reg"),
    Opcode.REGISTER_LOAD: ("dst_reg",),
    Opcode.REGISTER_STORE: ("src_reg",),
    Opcode.BRANCH: ("reg", "rhs_reg"),
}
# Registers each opcode writes (the rest of REGISTER_FIELDS are read).
REGISTERS_WRITTEN = {Opcode.REGISTER_MOVE: ("dst_reg",), Opcode.REGISTER_LOAD: ("dst_reg",)}


def wrap32(v: int) -> int:
    return ((int(v) + 2**31) % 2**32) - 2**31


def _require_registers(ins: Instruction, keys, optional=()) -> None:
    for key in keys:
        reg = ins.imm.get(key, -1 if key in optional else None)
        ok = isinstance(reg, (int, np.integer)) and (reg >= 0 or (key in optional and reg == -1))
        require(ok, ins, f"{key}={reg!r} is not a register number")


# ---------------------------------------------------------------- checks


def _check_move(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 0, dst=False)
    _require_registers(ins, ("dst_reg", "src_reg"), optional=("src_reg",))
    require(isinstance(ins.imm.get("value", 0), (int, np.integer)), ins, "value must be an integer")


def _check_load(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 1, dst=False)
    _require_registers(ins, ("dst_reg",))
    src = ins.srcs[0]
    require(src.num_elements == 1, ins, f"loads one value; {src.describe()} has {src.num_elements}")
    if not src.dtype.is_int:
        raise fail(ins, f"loads an integer (up to 32 bits); {src.describe()} is {src.dtype.name}", DtypeError)


def _check_store(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 0)
    _require_registers(ins, ("src_reg",))
    dst = ins.dst
    require(dst.num_elements == 1, ins, f"stores one value; {dst.describe()} has {dst.num_elements}")
    if dst.dtype.name not in STORE_DTYPES:
        raise fail(ins, f"stores a 32-bit register into int32 or uint32; {dst.describe()} is "
                   f"{dst.dtype.name}", DtypeError)


def _check_branch(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 0, dst=False)
    require(ins.imm.get("cmp") in BRANCH_CMPS, ins, f"cmp={ins.imm.get('cmp')!r}; one of {BRANCH_CMPS}")
    require(isinstance(ins.imm.get("target"), (int, np.integer)) and ins.imm["target"] >= 0, ins,
            f"target={ins.imm.get('target')!r} is not an instruction index")
    if ins.imm["cmp"] != "always":
        _require_registers(ins, ("reg", "rhs_reg"), optional=("rhs_reg",))


def _check_barrier(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 0, dst=False)
    barrier = ins.imm.get("barrier", 0)
    require(isinstance(barrier, (int, np.integer)) and barrier >= 0, ins,
            f"barrier={barrier!r} is not a barrier number")


# ---------------------------------------------------------------- costs


def _cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``sequencer_instruction_cycles`` (assumed; not published)."""
    return float(chip.sequencer_instruction_cycles)


def _load_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``register_load_cycles`` (assumed; not published): a sequencer's read of one memory word."""
    return float(chip.register_load_cycles)


# ---------------------------------------------------------------- reference


def _ref_move(ins: Instruction, mem: RefMemory) -> None:
    src = ins.imm.get("src_reg", -1)
    base = mem.registers[src] if src >= 0 else 0
    mem.registers[ins.imm["dst_reg"]] = wrap32(base + ins.imm.get("value", 0))


def _ref_load(ins: Instruction, mem: RefMemory) -> None:
    mem.registers[ins.imm["dst_reg"]] = wrap32(mem.read_int(ins.srcs[0]).reshape(-1)[0])


def _ref_store(ins: Instruction, mem: RefMemory) -> None:
    value = mem.registers[ins.imm["src_reg"]]
    bits = np.array([[value]], dtype=np.int64).astype(np.int32).view(ins.dst.dtype.numpy)
    mem.write_raw(ins.dst, bits)


def branch_taken(cmp: str, a: int, b: int) -> bool:
    return {"always": True, "equal": a == b, "not_equal": a != b, "less": a < b, "less_equal": a <= b,
            "greater": a > b, "greater_equal": a >= b}[cmp]


def _ref_branch(ins: Instruction, mem: RefMemory) -> None:
    imm = ins.imm
    a = mem.registers[imm["reg"]] if imm["cmp"] != "always" else 0
    rhs = imm.get("rhs_reg", -1)
    b = mem.registers[rhs] if rhs >= 0 else imm.get("value", 0)
    if branch_taken(imm["cmp"], a, b):
        mem.jump = imm["target"]


def _ref_barrier(ins: Instruction, mem: RefMemory) -> None:
    mem.paused = True


# ---------------------------------------------------------------- Numba


def _encode_move(ins: Instruction):
    return [ins.imm["dst_reg"], ins.imm.get("src_reg", -1), wrap32(ins.imm.get("value", 0))], []


def _encode_load(ins: Instruction):
    return [ins.imm["dst_reg"]], []


def _encode_store(ins: Instruction):
    return [ins.imm["src_reg"]], []


def _encode_branch(ins: Instruction):
    imm = ins.imm
    always = imm["cmp"] == "always"
    return [BRANCH_CMPS.index(imm["cmp"]), 0 if always else imm["reg"],
            -1 if always else imm.get("rhs_reg", -1), wrap32(imm.get("value", 0)), imm["target"]], []


@njit(cache=True, inline="always")
def register_slot(bases, reg):
    return bases.size - REG0_FROM_END - reg


@njit(cache=True, inline="always")
def _wrap32_nb(v):
    return ((v + 2147483648) % 4294967296) - 2147483648


@njit(cache=True)
def _nb_move(row, frow, bases):
    src = row[IMM + 1]
    base = bases[register_slot(bases, src)] if src >= 0 else 0
    bases[register_slot(bases, row[IMM])] = _wrap32_nb(base + row[IMM + 2])


@njit(cache=True)
def _nb_load(row, frow, bases):
    bases[register_slot(bases, row[IMM])] = _wrap32_nb(gather_i64(row, SRC0, bases).reshape(-1)[0])


@njit(cache=True)
def _nb_store(row, frow, bases):
    value = bases[register_slot(bases, row[IMM])]
    if row[DST + F_DTYPE] != _INT32 and value < 0:  # uint32: the same bits
        value += 4294967296
    out = np.empty((1, 1), np.int64)
    out[0, 0] = value
    scatter_i64(row, DST, bases, out)


@njit(cache=True)
def _nb_branch(row, frow, bases):
    cmp = row[IMM]
    a = bases[register_slot(bases, row[IMM + 1])] if cmp != 0 else 0
    rhs = row[IMM + 2]
    b = bases[register_slot(bases, rhs)] if rhs >= 0 else row[IMM + 3]
    if cmp == 0:
        taken = True
    elif cmp == 1:
        taken = a == b
    elif cmp == 2:
        taken = a != b
    elif cmp == 3:
        taken = a < b
    elif cmp == 4:
        taken = a <= b
    elif cmp == 5:
        taken = a > b
    else:
        taken = a >= b
    if taken:
        bases[bases.size - JUMP_FROM_END] = row[IMM + 4] + 1


def _encode_barrier(ins: Instruction):
    return [int(ins.imm.get("barrier", 0))], []


@njit(cache=True)
def _nb_barrier(row, frow, bases):
    bases[bases.size - 1] = STATUS_PAUSED



OPS = [
    OpDef(Opcode.REGISTER_MOVE, _check_move, _cycles, _ref_move, _encode_move, _nb_move),
    OpDef(Opcode.REGISTER_LOAD, _check_load, _load_cycles, _ref_load, _encode_load, _nb_load),
    OpDef(Opcode.REGISTER_STORE, _check_store, _cycles, _ref_store, _encode_store, _nb_store),
    OpDef(Opcode.BRANCH, _check_branch, _cycles, _ref_branch, _encode_branch, _nb_branch),
    OpDef(Opcode.CORE_BARRIER, _check_barrier, _cycles, _ref_barrier, _encode_barrier, _nb_barrier),
]
