"""Dynamic loops in a finished trace: where they are, the liveness they need, their branch targets.

``isa/registers.py`` records a loop on a register as two BRANCH records carrying a ``loop`` marker
(the test that leaves it, ``role="exit"``, and the jump back, ``role="back"``). Records may still be
inserted before the Program is built, so targets are filled in last (``resolve_branches``).
"""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.sim.ir import ON_CHIP, Opcode


def loop_spans(records) -> list[tuple[int, int, object]]:
    """(exit test index, back jump index, loop) of every dynamic loop in ``records``."""
    opened: dict[int, int] = {}
    spans = []
    for i, rec in enumerate(records):
        imm = rec[4]
        if rec[0] is Opcode.BRANCH and "loop" in imm:
            loop = imm["loop"]
            if imm["role"] == "exit":
                opened[id(loop)] = i
            else:
                spans.append((opened.pop(id(loop)), i, loop))
    if opened:
        raise UnsupportedError("a dynamic loop on a register was left without reaching its end (a `break` or "
                               "`return` in its body, or an exception): its body must run to the end",
                               location=records[min(opened.values())][5])
    return spans


def extend_liveness(trace) -> None:
    """A tile used inside a dynamic loop and also before or after it is held for the whole loop."""
    if not trace.dynamic_loops:  # most kernels: no scan of every record
        return
    spans = loop_spans(trace.records)
    if not spans:
        return
    for b in trace.buffers:
        if b.memory not in ON_CHIP or b.alias_of is not None or b.first < 0:
            continue
        for _ in range(2):  # spans come inner loops first; a second pass settles siblings
            for lo, hi, _loop in spans:
                if b.first <= hi and b.last >= lo and (b.first < lo or b.last > hi):
                    b.first, b.last = min(b.first, lo), max(b.last, hi)


def resolve_branches(records) -> list:
    """The records with each loop BRANCH's ``target`` (an index into ``records``) filled in."""
    spans = loop_spans(records)
    if not spans:
        return records
    out = list(records)
    for lo, hi, _ in spans:
        for i, target in ((lo, hi + 1), (hi, lo)):
            rec = out[i]
            imm = {k: v for k, v in rec[4].items() if k not in ("loop", "role")}
            imm["target"] = target
            out[i] = (*rec[:4], imm, *rec[5:])
    return out
