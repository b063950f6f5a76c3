"""What every engine module provides per opcode, and the helpers their checks share.

An engine module defines, for each of its opcodes, one :class:`OpDef`: ``check`` (rules beyond the
generic ones in ``sim/validate.py``), ``cycles`` (the documented cost in engine cycles),
``reference`` (numpy semantics on a :class:`RefMemory`), ``encode`` (its immediates for the Numba
row) and ``kernel`` (the Numba semantics, ``kernel(row, frow, bases)``). Keep all five side by side.

The elementwise families (VectorE, and the same instructions on ScalarE and GpSimd) share the
free-size limit and the cost rules at the end: a documented N term, divided by any perf-mode
speedup, times the stride penalty (S9: an innermost stride above
``access_stride_penalty_threshold_bytes`` halves an interface's bandwidth, so the N term is
multiplied by ``access_stride_penalty_factor``), and ``max(MIN_II, ...)`` last.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from neuronsim.errors import ConstraintError, DtypeError, NeuronSimError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AccessPattern, AluOp, Instruction, Memory, Opcode


@dataclass(frozen=True)
class OpDef:
    opcode: Opcode
    check: Callable[[Instruction, ChipSpec], None]
    cycles: Callable[[Instruction, ChipSpec], float]
    reference: Callable  # (Instruction, RefMemory) -> None
    encode: Callable[[Instruction], tuple[list[int], list[float]]]
    kernel: Callable  # numba: (row int64[:], frow float64[:], bases int64[:]) -> None
    # For the few instructions that check values read while running (an index out of range): the
    # error the reference raises, which the Numba kernel signals through the status slot instead.
    runtime_error: Callable[[Instruction], NeuronSimError] | None = None
    # For instructions that touch only part of an operand (some partitions or positions): the
    # (access pattern, is_write) pairs they really read and write, which the uninitialized-read check
    # uses instead of ``Instruction.accesses()`` (a merged destination's old contents are not read).
    touched: Callable[[Instruction], list[tuple[AccessPattern, bool]]] | None = None


def partition_rows(ap: AccessPattern, first: int, count: int) -> AccessPattern:
    """The ``count`` partitions of ``ap`` from its partition ``first`` on (same free dims)."""
    step = ap.pattern[0][0]
    return AccessPattern(ap.tensor, ap.offset + first * step, ((step, count),) + ap.pattern[1:])


def no_immediates(ins: Instruction) -> tuple[list[int], list[float]]:
    return [], []


def fail(ins: Instruction, what: str, cls: type[NeuronSimError] = ConstraintError) -> NeuronSimError:
    """An error naming the instruction and the kernel line; ``raise fail(...)``."""
    return cls(what, instruction=ins.describe(), location=ins.location)


def flag(ins: Instruction, name: str) -> bool:
    """A boolean immediate, False when absent."""
    return bool(ins.imm.get(name, False))


def alu_immediate(ins: Instruction, name: str, default=None, optional: bool = False) -> AluOp | None:
    """The ``AluOp`` immediate ``name`` (an AluOp, its value or its name), ``default`` when absent;
    None when absent with no default and ``optional``."""
    raw = ins.imm.get(name, default)
    if raw is None:
        if optional:
            return None
        raise fail(ins, f"needs the immediate '{name}' (an ALU operator)")
    try:
        return AluOp[raw] if isinstance(raw, str) else AluOp(raw)
    except (KeyError, ValueError):
        raise fail(ins, f"immediate {name}={raw!r} is not an ALU operator") from None


def require(cond: bool, ins: Instruction, what: str, cls: type[NeuronSimError] = ConstraintError) -> None:
    if not cond:
        raise fail(ins, what, cls)


def require_operands(ins: Instruction, n_srcs: int | tuple[int, ...], dst: bool = True) -> None:
    counts = (n_srcs,) if isinstance(n_srcs, int) else n_srcs
    require(len(ins.srcs) in counts, ins, f"takes {' or '.join(map(str, counts))} source operand(s), "
            f"got {len(ins.srcs)}")
    require((ins.dst is not None) == dst, ins, "needs a destination" if dst else "takes no destination")


def require_same_shape(ins: Instruction, a: AccessPattern, b: AccessPattern, what_a: str,
                       what_b: str) -> None:
    require(a.partitions == b.partitions and a.free_size == b.free_size, ins,
            f"{what_a} is {a.partitions}x{a.free_size} (partitions x free) but {what_b} is "
            f"{b.partitions}x{b.free_size}")


def require_known_immediates(ins: Instruction, known: frozenset[str]) -> None:
    """Reject immediates the opcode does not take (a misspelt ``num_axes`` would be ignored)."""
    unknown = sorted(set(ins.imm) - known)
    require(not unknown, ins, f"has unknown immediates {unknown}; {ins.opcode.name.lower()} takes "
            f"{sorted(known) if known else 'none'}")


def require_dtype(ins: Instruction, ap: AccessPattern, allowed: tuple[DType, ...] | frozenset,
                  role: str) -> None:
    if ap.dtype not in allowed:
        raise fail(ins, f"{role} dtype {ap.dtype.name} is not allowed here; allowed: "
                   f"{sorted(d.name for d in allowed)}", DtypeError)


def require_alu(ins: Instruction, name: str, allowed, default=None) -> AluOp:
    """The ``AluOp`` immediate ``name``, which must be one of ``allowed``."""
    op = alu_immediate(ins, name, default)
    require(op in allowed, ins, f"{name}={op.name} is not allowed here; allowed: "
            f"{', '.join(sorted(o.name for o in allowed))}")
    return op


def require_shape(ins: Instruction, ap: AccessPattern, partitions: int, free: int, role: str) -> None:
    require(ap.partitions == partitions and ap.free_size == free, ins,
            f"{role} is {ap.partitions}x{ap.free_size} (partitions x free) but must be {partitions}x{free}")


def require_int(ins: Instruction, ap: AccessPattern, role: str, why: str) -> None:
    if not ap.dtype.is_int:
        raise fail(ins, f"{role} dtype {ap.dtype.name} is not an integer dtype; {why}", DtypeError)


def require_vector_free(ins: Instruction, chip: ChipSpec, ap: AccessPattern, role: str) -> None:
    """S9: VectorE reads up to 64K elements per partition from SBUF, 4K from PSUM."""
    limit = chip.vector_free_max_psum if ap.memory is Memory.PSUM else chip.vector_free_max_sbuf
    require(ap.free_size <= limit, ins, f"{role} has {ap.free_size} elements per partition; VectorE reads at "
            f"most {limit} per partition from {ap.memory.name}")


def max_ii(n: float, chip: ChipSpec) -> float:
    """The legacy cost ``max(MIN_II, n)`` (S23)."""
    return max(float(chip.min_ii_cycles), float(n))


# ---------------------------------------------------------------- elementwise families

def distinct_free_elements(ap: AccessPattern) -> int:
    """Elements per partition an AP reaches, a broadcast (step-0) dim counted once."""
    return math.prod(n for step, n in ap.free_dims if step != 0)


def require_free_limit(ins: Instruction, chip: ChipSpec) -> None:
    """S9: up to ``vector_free_max_sbuf`` elements per partition; a PSUM operand holds at most
    ``vector_free_max_psum`` (PSUM's 16 KiB per partition of fp32) — counted as the elements it
    reaches, so a PSUM row broadcast along a step-0 dim streams as far as the SBUF side goes
    (nki-library's layernorm_tkg subtracts a [P, 512] PSUM mean broadcast over 24 columns each)."""
    aps = [ap for ap, _ in ins.accesses()]
    limit = chip.vector_free_max_sbuf
    free = max(ap.free_size for ap in aps)
    require(free <= limit, ins, f"has {free} elements per partition; the limit is {limit} "
            "(vector_free_max_sbuf)")
    for ap in aps:
        if ap.memory is Memory.PSUM:
            reach = distinct_free_elements(ap)
            require(reach <= chip.vector_free_max_psum, ins, f"reads or writes {reach} elements per "
                    f"partition of PSUM ({ap.describe()}); the limit is {chip.vector_free_max_psum} "
                    "(vector_free_max_psum)")


def require_not_both_psum(ins: Instruction, a: AccessPattern, b: AccessPattern, what: str) -> None:
    require(not (a.memory is Memory.PSUM and b.memory is Memory.PSUM), ins,
            f"{what} cannot both be in PSUM ({a.describe()}, {b.describe()})")


def require_int_operands(ins: Instruction, aps: list[tuple[AccessPattern, str]], why: str) -> None:
    for ap, role in aps:
        if not ap.dtype.is_int:
            raise fail(ins, f"{role} is {ap.dtype.name}; {why} need integer dtypes on every operand",
                       DtypeError)


def _stride_factor(ins: Instruction, chip: ChipSpec) -> float:
    """S9: an innermost stride above the threshold halves an interface's bandwidth."""
    worst = max(ap.innermost_stride_bytes() for ap, _ in ins.accesses())
    if worst > chip.access_stride_penalty_threshold_bytes:
        return float(chip.access_stride_penalty_factor)
    return 1.0


def elementwise_cycles(ins: Instruction, chip: ChipSpec, n_term: float, speedup: float = 1.0) -> float:
    """``max(MIN_II, n_term / speedup * stride_factor)``."""
    return max_ii(n_term / speedup * _stride_factor(ins, chip), chip)


def _contiguous_innermost(ap: AccessPattern) -> bool:
    return ap.innermost_stride_bytes() == ap.dtype.itemsize


def vector_perf_speedup(data: AccessPattern, dst: AccessPattern, chip: ChipSpec) -> float:
    """v3 perf mode for tensor_copy / tensor_scalar (S10): 16-bit float in and out, 4x when both are
    in SBUF with a contiguous innermost dim, 2x otherwise (non-contiguous, or PSUM)."""
    if not (data.dtype.is_16bit_float and dst.dtype.is_16bit_float):
        return 1.0
    in_sbuf = data.memory is Memory.SBUF and dst.memory is Memory.SBUF
    if in_sbuf and _contiguous_innermost(data) and _contiguous_innermost(dst):
        return float(chip.vector_perf_mode_sbuf_16bit_speedup)
    return float(chip.vector_perf_mode_other_16bit_speedup)


def scalar_speedup(data: AccessPattern, dst: AccessPattern, chip: ChipSpec) -> float:
    """ScalarE tensor_scalar / tensor_copy (S23, S11): 16-bit float in and out run faster."""
    sixteen_bit = data.dtype.is_16bit_float and dst.dtype.is_16bit_float
    return float(chip.scalar_engine_16bit_speedup) if sixteen_bit else 1.0
