"""What every engine module provides per opcode, and the helpers their checks share.

An engine module defines, for each of its opcodes, one :class:`OpDef`: ``check`` (rules beyond the
generic ones in ``sim/validate.py``), ``cycles`` (the documented cost in engine cycles),
``reference`` (numpy semantics on a :class:`RefMemory`), ``encode`` (its immediates for the Numba
row) and ``kernel`` (the Numba semantics, ``kernel(row, frow, bases)``). Keep all five side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from neuronsim.errors import ConstraintError, DtypeError, NeuronSimError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AccessPattern, Instruction, Opcode


@dataclass(frozen=True)
class OpDef:
    opcode: Opcode
    check: Callable[[Instruction, ChipSpec], None]
    cycles: Callable[[Instruction, ChipSpec], float]
    reference: Callable  # (Instruction, RefMemory) -> None
    encode: Callable[[Instruction], tuple[list[int], list[float]]]
    kernel: Callable  # numba: (row int64[:], frow float64[:], bases int64[:]) -> None


def no_immediates(ins: Instruction) -> tuple[list[int], list[float]]:
    return [], []


def no_check(ins: Instruction, chip: ChipSpec) -> None:
    return None


def fail(ins: Instruction, what: str, cls: type[NeuronSimError] = ConstraintError) -> NeuronSimError:
    """An error naming the instruction and the kernel line; ``raise fail(...)``."""
    return cls(what, instruction=ins.describe(), location=ins.location)


def require(cond: bool, ins: Instruction, what: str, cls: type[NeuronSimError] = ConstraintError) -> None:
    if not cond:
        raise fail(ins, what, cls)


def require_operands(ins: Instruction, n_srcs: int | tuple[int, ...], dst: bool = True) -> None:
    counts = (n_srcs,) if isinstance(n_srcs, int) else n_srcs
    require(len(ins.srcs) in counts, ins, f"takes {' or '.join(map(str, counts))} source operand(s), "
            f"got {len(ins.srcs)}")
    require((ins.dst is not None) == dst, ins, "needs a destination" if dst else "takes no destination")


def require_same_shape(ins: Instruction, a: AccessPattern, b: AccessPattern, what_a: str, what_b: str) -> None:
    require(a.partitions == b.partitions and a.free_size == b.free_size, ins,
            f"{what_a} is {a.partitions}x{a.free_size} (partitions x free) but {what_b} is "
            f"{b.partitions}x{b.free_size}")


def require_dtype(ins: Instruction, ap: AccessPattern, allowed: tuple[DType, ...] | frozenset, role: str) -> None:
    if ap.dtype not in allowed:
        raise fail(ins, f"{role} dtype {ap.dtype.name} is not allowed here; allowed: "
                   f"{sorted(d.name for d in allowed)}", DtypeError)


def max_ii(n: float, chip: ChipSpec) -> float:
    """The legacy cost ``max(MIN_II, n)`` (S23)."""
    return max(float(chip.min_ii_cycles), float(n))
