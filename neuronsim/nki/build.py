"""Turning a finished, allocated trace into IR Programs (one per ``core_barrier`` phase)."""

from __future__ import annotations

import dataclasses

from neuronsim.nki.buffer import Buffer
from neuronsim.nki.control_flow import resolve_branches
from neuronsim.nki.trace import Trace
from neuronsim.sim.ir import ON_CHIP, AccessPattern, Instruction, Memory, Program, TensorDecl


def _fast_constructor(cls, names: tuple[str, ...]):
    """A constructor for a frozen, slot-less dataclass that sets its ``__dict__`` directly.

    Building a Program creates a few objects per traced instruction and the frozen-dataclass
    ``__init__`` (one ``object.__setattr__`` per field) is half the build time. Falls back to the
    class itself if it ever grows ``__slots__``, ``__post_init__`` or other fields.
    """
    if (
        hasattr(cls, "__slots__")
        or hasattr(cls, "__post_init__")
        or tuple(f.name for f in dataclasses.fields(cls)) != names
    ):
        return cls
    args = ", ".join(names)
    fields = ", ".join(f"{n!r}: {n}" for n in names)
    namespace = {"new": object.__new__, "setattr": object.__setattr__, "cls": cls}
    source = (
        f"def make({args}):\n    obj = new(cls)\n    setattr(obj, '__dict__', {{{fields}}})\n    return obj\n"
    )
    exec(source, namespace)  # as dataclasses builds __init__
    return namespace["make"]


_new_ap = _fast_constructor(AccessPattern, ("tensor", "offset", "pattern"))
_new_instruction = _fast_constructor(
    Instruction, ("opcode", "engine", "dst", "srcs", "imm", "location", "name", "queue", "dst2")
)


def build_programs(trace: Trace, location: str | None) -> list[Program]:
    """The trace's instructions as Programs: one per phase between ``core_barrier`` calls.

    Every phase Program declares all of the kernel's HBM tensors (so arrays bind the same way in
    each) and the on-chip tensors its instructions use, at their allocated addresses.
    """
    bounds = [0, *trace.barriers, len(trace.records)]
    programs = []
    for phase, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=False)):
        name = trace.name if len(bounds) == 2 else f"{trace.name}.phase{phase}"
        records = trace.records[lo:hi]
        programs.append(_build(trace, resolve_branches(records) if trace.dynamic_loops else records, name,
                               location))
    return programs


def _build(trace: Trace, records, name: str, location: str | None) -> Program:
    tensors: list[TensorDecl] = []
    decl_of: list[TensorDecl | None] = [None] * len(trace.buffers)  # by buffer id

    def declare(b: Buffer) -> TensorDecl:
        on_chip = b.memory in ON_CHIP
        root = None if on_chip or b.alias_of is None else decl_of[b.alias_of.id] or declare(b.alias_of)
        d = TensorDecl(
            len(tensors),
            b.name,
            b.memory,
            b.shape,
            b.dtype,
            "scratch" if on_chip else (b.kind if root is None else root.kind),
            b.address if on_chip else None,
            b.location,
            None if root is None else root.id,
        )
        decl_of[b.id] = d
        tensors.append(d)
        return d

    for b in trace.buffers:
        if b.memory is Memory.HBM:
            declare(b)
    new_ap = _new_ap
    instructions = []
    append = instructions.append
    for opcode, engine, dst, srcs, imm, loc, iname, queue, dst2 in records:
        ops = []
        for v in srcs:
            d = decl_of[v.buf.id] or declare(v.buf)
            ops.append(new_ap(d, v.offset, v.ap_pattern()))
        out = out2 = None
        if dst is not None:
            d = decl_of[dst.buf.id] or declare(dst.buf)
            out = new_ap(d, dst.offset, dst.ap_pattern())
        if dst2 is not None:
            d = decl_of[dst2.buf.id] or declare(dst2.buf)
            out2 = new_ap(d, dst2.offset, dst2.ap_pattern())
        append(_new_instruction(opcode, engine, out, tuple(ops), imm, loc, iname, queue, out2))
    return Program(name, tuple(tensors), tuple(instructions), location)
