"""A profiling session: what ran while ``neuronsim profile`` (or :func:`start`) was recording.

Producers hand their records to the profiler here; the profiler imports none of them:

- the NKI simulator, after each launch: :func:`record_launch` with the kernel runs of the launch
  placed on their cores (:class:`~neuronsim.profiler.events.PlacedRun`); a no-op (one global read)
  when no session is recording.
- the device, once when it registers: :func:`register_clock_reader`, a function returning each
  device's op events and one asking the device to keep more records while a session records.
  Recording costs the script nothing: the clock records every op anyway (with the host time it
  was issued, which is also what ``neuronsim profile``'s host track is drawn from); a session
  only keeps more records.

Nothing here imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from neuronsim.profiler.events import DeviceOpEvent, PlacedRun

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


@dataclass(frozen=True)
class ClockReader:
    """A producer of device op events: ``events()`` gives each device's ops by index; ``keep(n)``
    asks it to keep ``n`` records per device (a session records), ``keep(None)`` its usual number."""

    events: Callable[[], Mapping[int, Sequence[DeviceOpEvent]]]
    keep: Callable[[int | None], None]


_clock_readers: dict[str, ClockReader] = {}


def register_clock_reader(name: str, events: Callable[[], Mapping[int, Sequence[DeviceOpEvent]]],
                          keep: Callable[[int | None], None]) -> None:
    """Called once by a device: where the profiler reads its op events (registering ``name``
    again replaces the reader). If a session is already recording, the device keeps more from now."""
    reader = _clock_readers[name] = ClockReader(events, keep)
    if _active is not None:
        reader.keep(DEVICE_CLOCK_CAPACITY)


def active() -> Session | None:
    return _active


def start(detail: str = "op") -> Session:
    global _active
    if detail not in ("op", "instruction"):
        raise ValueError(f"detail must be 'op' or 'instruction', got {detail!r}")
    _active = Session(detail)
    for reader in list(_clock_readers.values()):
        reader.keep(DEVICE_CLOCK_CAPACITY)
    return _active


def stop() -> Session | None:
    """Stop recording. The devices keep the records kept so far (:func:`device_events` reads them)
    until :func:`release_clocks`."""
    global _active
    session, _active = _active, None
    return session


def release_clocks() -> None:
    """Let the devices go back to their usual record rings, once what a session recorded is read."""
    for reader in list(_clock_readers.values()):
        reader.keep(None)


def record_launch(placed: Sequence[PlacedRun], name: str, wall_ns: int | None = None) -> None:
    """Called by the NKI simulator after a launch; a no-op unless a session is recording."""
    session = _active
    if session is not None:
        session.launches.append(Launch(name, tuple(placed), time.time_ns() if wall_ns is None else wall_ns))


def device_events() -> dict[int, list[DeviceOpEvent]]:
    """Each used device's ops, by device index (empty when no device ran anything)."""
    out: dict[int, list[DeviceOpEvent]] = {}
    for reader in list(_clock_readers.values()):
        for index, events in reader.events().items():
            if events:
                out.setdefault(index, []).extend(events)
    return dict(sorted(out.items()))
