"""Measuring a block of code on the simulated device: what it cost in simulated time, and where.

``with measure() as block: ...`` records what the block ran — ops on the emulated ``neuron``
device (from the device clocks) and ``nki.simulate`` launches (through a profiler session) — and
at its end ``block.summary`` is the summary ``neuronsim profile`` would print for that code alone
(the same document as its summary.json, Neuron Explorer's field names). A profile returned by
``nki.simulate(kernel, profile=True)`` becomes a :class:`Measurement` with :func:`from_profile`.

Simulated time is deterministic: the same code measures the same, bit for bit, on every run.
Nothing here imports torch; the device's op tracking is read through ``torch.neuron`` when torch
is loaded with the emulated device registered.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from neuronsim.testing.baselines import figures


@dataclass(frozen=True)
class Measurement:
    """What a block (or one kernel launch) cost on the simulated device."""

    summary: dict  # Explorer-named fields (seconds, bytes, percent), as `neuronsim profile` writes them
    op_seconds: dict[str, float]  # device seconds per op: ATen ops by name, NKI instructions by opcode
    fallback_ops: dict[str, int] = field(default_factory=dict)  # host-fallback op -> calls (op tracking)
    executed_ops: dict[str, int] = field(default_factory=dict)  # native op -> calls (op tracking)
    chip: str = "trn2"
    kernels: tuple[str, ...] = ()  # nki.simulate launches in the block

    @property
    def total_time(self) -> float:
        """Simulated device seconds."""
        return float(self.summary.get("total_time", 0.0))

    @property
    def total_time_us(self) -> float:
        return self.total_time * 1e6

    def figures(self) -> dict:
        """The record a baseline stores (see :mod:`neuronsim.testing.baselines`)."""
        return figures(self.summary, self.op_seconds)


def _kernel_ops(kernel: str, rows) -> dict[str, float]:
    return {f"{kernel}: {r['name']} ({r['kind']})": float(r["total_time"]) for r in rows}


def from_profile(profile) -> Measurement:
    """A Measurement of one ``nki.simulate(kernel, profile=True)`` launch from its Profile."""
    if not hasattr(profile, "summary") or not hasattr(profile, "timeline"):
        from neuronsim.errors import InputError

        raise InputError(f"expected the profile of nki.simulate(kernel, profile=True), got "
                         f"{type(profile).__name__}")
    totals: dict[tuple[str, str], float] = {}
    for e in profile.timeline:
        key = (e.opcode.lower(), e.engine)
        totals[key] = totals.get(key, 0.0) + (e.end - e.start)
    rows = [{"name": k[0], "kind": k[1], "total_time": v} for k, v in totals.items()]
    return Measurement(dict(profile.summary), _kernel_ops(profile.kernel, rows), chip=profile.chip,
                       kernels=(profile.kernel,))


# ---- recording a block ---------------------------------------------------------------------------

def _device_module():
    """``torch.neuron`` when torch is loaded and the device registered is neuronsim's, else None."""
    torch = sys.modules.get("torch")
    module = getattr(torch, "neuron", None) if torch is not None else None
    return module if getattr(module, "__neuronsim__", False) else None


def op_counts() -> dict[str, dict[str, int]]:
    """``torch.neuron.get_op_counts()`` of the emulated device (empty when it is not running)."""
    module = _device_module()
    if module is None:
        return {"executed": {}, "fallback": {}}
    return module.get_op_counts()


def counts_since(before: Mapping[str, Mapping[str, int]], kind: str) -> dict[str, int]:
    now = op_counts()[kind]
    out = {name: n - before[kind].get(name, 0) for name, n in now.items()}
    return {name: n for name, n in out.items() if n > 0}


def _clock_positions() -> dict[int, float]:
    """Each device clock's simulated time now (clocks are created by the device's first op)."""
    clock = sys.modules.get("neuronsim.device.clock")
    if clock is None:
        return {}
    return {index: c.now_ns for index, c in clock.all_clocks().items()}


class Block:
    """One measured block: :meth:`start` and :meth:`stop` (``measure()`` calls both), then
    :attr:`measurement`, whose fields read through (``block.summary``, ``block.total_time_us``)."""

    def __init__(self, detail: str = "op"):
        self.detail = detail
        self.measurement: Measurement | None = None
        self._session = None
        self._owns_session = False

    def start(self) -> Block:
        from neuronsim.profiler import session

        self._session = session.active()
        self._owns_session = self._session is None
        if self._owns_session:
            self._session = session.start(self.detail)
        self._first_launch = len(self._session.launches)
        self._clocks = _clock_positions()
        self._ops = op_counts()
        return self

    def stop(self) -> Measurement:
        from neuronsim.profiler import session

        try:
            self.measurement = self._measure()
        finally:
            if self._owns_session and session.active() is self._session:
                session.stop()
                # the clocks go back to their usual ring, so a long test session does not keep them all
                session.release_clocks()
        return self.measurement

    def snapshot(self) -> Measurement:
        """The measurement of what ran so far (the block goes on)."""
        return self._measure()

    def write(self, out_dir) -> str:
        """Write the block's profile as ``neuronsim profile`` does (trace.json, summary.json, ops.csv)."""
        from neuronsim.profiler import report

        doc, trace, _launches, _chip = self._profile()
        return str(report.write_profile(out_dir, doc, trace))

    def _profile(self):
        """(summary document, trace, launches, chip) of what the block ran, as `neuronsim profile`
        builds them for a whole script."""
        from neuronsim.profiler import report, session
        from neuronsim.profiler.session import Session

        launches = self._session.launches[self._first_launch:]
        devices = {}
        for index, events in session.device_events().items():
            since = self._clocks.get(index, float("-inf"))
            kept = [e for e in events if e.start_ns >= since]
            if kept:
                devices[index] = kept
        chip = _chip(launches)
        part = Session(self.detail, self._session.started_wall_ns, list(launches))
        doc, trace = report.session_profile(part, devices, chip)
        return doc, trace, launches, chip

    def _measure(self) -> Measurement:
        from neuronsim.profiler import report

        doc, _trace, launches, chip = self._profile()
        ops = {}
        for row in doc["ops"]:
            if row["kind"] == "nki.simulate":
                continue  # broken down by instruction below
            label = row["name"] if row["kind"] == "kernel" else f"{row['name']} ({row['kind']})"
            ops[label] = ops.get(label, 0.0) + float(row["total_time"])
        for launch in launches:
            rows = report.opcode_table([p.run for p in launch.placed])
            for label, seconds in _kernel_ops(launch.name, rows).items():
                ops[label] = ops.get(label, 0.0) + seconds
        return Measurement(doc, ops, counts_since(self._ops, "fallback"), counts_since(self._ops, "executed"),
                           chip.name, tuple(launch.name for launch in launches))

    def __getattr__(self, name: str):
        """Measurement fields read through: after the block, its measurement's; inside it, a
        snapshot of what ran so far."""
        if name.startswith("_") or name in ("detail", "measurement"):
            raise AttributeError(name)
        measurement = self.measurement if self.measurement is not None else self.snapshot()
        return getattr(measurement, name)


def _chip(launches):
    """The chip of the block: the device's (the options'), or the NKI launches' when only they ran."""
    from neuronsim.options import current
    from neuronsim.sim.chips import get_chip

    chip = get_chip(current().chip)
    chips = {p.run.chip.name: p.run.chip for launch in launches for p in launch.placed}
    if chips and chip.name not in chips:
        return next(iter(chips.values()))
    return chip


class measure:
    """``with measure() as block: ...`` — then ``block.summary``, ``block.total_time_us``,
    ``block.fallback_ops``, ``block.figures()`` (see :class:`Measurement`)."""

    def __init__(self, detail: str = "op"):
        self.block = Block(detail)

    def __enter__(self) -> Block:
        return self.block.start()

    def __exit__(self, *exc) -> bool:
        self.block.stop()
        return False
