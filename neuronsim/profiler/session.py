"""A profiling session: what ran while ``neuronsim profile`` (or :func:`start`) was recording.

Producers push into the active session; when none is active the check is one global read:

- NKI: after each ``nki.simulate`` call, ``record_launch(placed_runs, name)`` — the kernel runs of
  the launch placed on their cores (:class:`~neuronsim.profiler.events.PlacedRun`).
- the device: its clocks' records, read at the end by :func:`device_events` (each
  ``neuronsim.device.clock`` record becomes a :class:`DeviceOpEvent`). Recording costs the script
  nothing: the clock records every op anyway (with the host time it was issued, which is also
  what ``neuronsim profile``'s host track is drawn from); a session only keeps more records.

Until ``nki.simulate`` calls :func:`record_launch` itself, :func:`observe_nki_simulate` wraps it
for the session (see there). Nothing here imports torch.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from neuronsim.profiler.events import DeviceOpEvent, KernelRun, PlacedRun, from_clock_events

# Device clock records kept while profiling (the clock's default ring is smaller).
DEVICE_CLOCK_CAPACITY = 1 << 21


@dataclass(frozen=True)
class Launch:
    """One ``nki.simulate`` call: its runs on their cores, and the host time it was issued."""

    name: str
    placed: tuple[PlacedRun, ...]
    wall_ns: int

    @property
    def total_ns(self) -> float:
        start = min((p.offset_ns for p in self.placed), default=0.0)
        return max((p.end_ns for p in self.placed), default=0.0) - start


@dataclass
class Session:
    detail: str = "op"
    started_wall_ns: int = field(default_factory=time.time_ns)
    launches: list[Launch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_active: Session | None = None


def active() -> Session | None:
    return _active


def start(detail: str = "op") -> Session:
    global _active
    if detail not in ("op", "instruction"):
        raise ValueError(f"detail must be 'op' or 'instruction', got {detail!r}")
    _active = Session(detail)
    _prepare_device_clocks()
    return _active


def stop() -> Session | None:
    global _active
    session, _active = _active, None
    return session


def record_launch(placed: Sequence[PlacedRun], name: str, wall_ns: int | None = None) -> None:
    """Called by ``nki.simulate`` after a launch; a no-op unless a session is recording."""
    session = _active
    if session is not None:
        session.launches.append(Launch(name, tuple(placed), time.time_ns() if wall_ns is None else wall_ns))


def _prepare_device_clocks() -> None:
    """Keep every device clock record while profiling (the clock module needs no torch)."""
    from neuronsim.device import clock

    clock.clock(0).set_capacity(DEVICE_CLOCK_CAPACITY)


def device_events() -> dict[int, list[DeviceOpEvent]]:
    """Each used device clock's ops (empty when the device never ran)."""
    module = sys.modules.get("neuronsim.device.clock")
    if module is None:
        return {}
    all_clocks = getattr(module, "all_clocks", None)
    clocks = all_clocks() if all_clocks is not None else dict(getattr(module, "_clocks", {}))
    out = {}
    for index, clk in sorted(clocks.items()):
        records = clk.events()
        if records:
            out[index] = from_clock_events(records)
    return out


def observe_nki_simulate() -> None:
    """Bridge until ``nki.simulate`` calls :func:`record_launch`: wrap its executor so each launch
    is recorded, laid out as ``nki.simulate`` lays it out (instance i of a phase on core
    ``i % min(instances, chip.default_lnc)``, one after another; phases back to back)."""
    try:
        simulate_module = importlib.import_module("neuronsim.nki.simulate")
    except ImportError:  # the NKI frontend is not there
        return
    original = getattr(simulate_module, "execute", None)
    if original is None or getattr(original, "_neuronsim_observed", False):
        return

    def execute(k, traced, args, kwargs):
        issued = time.time_ns()
        outputs, runs = original(k, traced, args, kwargs)
        if _active is not None:
            record_launch(_grid_layout(runs, traced.chip), traced.name, issued)
        return outputs, runs

    execute._neuronsim_observed = True
    simulate_module.execute = execute


def _grid_layout(runs, chip) -> list[PlacedRun]:
    placed = []
    n_instances = len(runs[0]) if runs else 0
    cores = max(1, min(n_instances, chip.default_lnc))
    t0 = 0.0
    for row in runs:
        core_time = [0.0] * cores
        for i, result in enumerate(row):
            core = i % cores
            run = KernelRun.from_prepared(result.prepared)
            placed.append(PlacedRun(run, core, t0 + core_time[core]))
            core_time[core] += run.total_ns
        t0 += max(core_time)
    return placed
