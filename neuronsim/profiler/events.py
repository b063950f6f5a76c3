"""What the profiler reads: kernel runs (a Program with its schedule) and device op events.

:class:`KernelRun` is one scheduled Program — what instruction detail draws and what the summary
of a kernel is computed from. :class:`DeviceOpEvent` is one op on a device clock: a native kernel,
a host fallback or a host<->device copy, in simulated device time. The device clock produces
them (:func:`from_clock_events` reads its records); nothing here imports torch or the device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neuronsim.sim.chips import ChipSpec
    from neuronsim.sim.ir import Program
    from neuronsim.sim.memory.layout import Placement
    from neuronsim.sim.schedule import Timeline

# DeviceOpEvent.kind
KERNEL = "kernel"  # a native kernel: the simulator ran the op's Program
FALLBACK = "fallback"  # computed by ATen-CPU; charged launch + a host round trip
TRANSFER = "transfer"  # a copy between host and device memory (.to('neuron'), .cpu(), .item())
COLLECTIVE = "collective"  # a torch.distributed collective or send/recv (neuronsim/device/distributed)
KINDS = (KERNEL, FALLBACK, TRANSFER, COLLECTIVE)


@dataclass(frozen=True, eq=False)
class KernelRun:
    """A Program and its schedule on a chip (``neuronsim.sim.prepare`` gives all four)."""

    program: Program
    timeline: Timeline
    chip: ChipSpec
    placement: Placement

    @classmethod
    def from_prepared(cls, prepared: Any) -> KernelRun:
        """From a ``neuronsim.sim.Prepared`` (or a ``RunResult``, through its ``.prepared``)."""
        prepared = getattr(prepared, "prepared", prepared)
        return cls(prepared.program, prepared.timeline, prepared.chip, prepared.placement)

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def total_ns(self) -> float:
        return self.timeline.total_ns


@dataclass(frozen=True, eq=False)
class PlacedRun:
    """A kernel run placed on a physical core of a launch, ``offset_ns`` after the launch start
    (an SPMD grid or a sequence of phases). Runs on one core must not overlap."""

    run: KernelRun
    core: int = 0
    offset_ns: float = 0.0

    @property
    def end_ns(self) -> float:
        return self.offset_ns + self.run.total_ns


@dataclass(frozen=True, eq=False)
class DeviceOpEvent:
    """One op on the device timeline, in simulated nanoseconds from the clock's start.

    ``duration_ns`` covers the whole op, launch overhead included; a kernel's own schedule starts
    ``launch_ns`` after ``start_ns``. ``engine_busy_ns`` (keys ``tensor``, ``vector``, ``scalar``,
    ``gpsimd``, ``sync``, ``dma``), ``flops`` (model FLOPs) and ``bytes`` describe a native op when
    no ``kernel`` is attached; with a ``kernel`` the summary computes them from its timeline.
    ``wall_ns`` is the host's ``time.time_ns()`` when the op was issued: it aligns the device lane
    with host ops in a torch.profiler trace.
    """

    name: str
    start_ns: float
    duration_ns: float
    native: bool
    kind: str = ""  # KERNEL for native ops, FALLBACK otherwise, unless given
    bytes: int = 0
    flops: float = 0.0
    engine_busy_ns: Mapping[str, float] = field(default_factory=dict)
    launch_ns: float = 0.0
    kernel: KernelRun | None = None
    wall_ns: int | None = None
    signature: tuple = ()
    direction: str = ""  # TRANSFER: "h2d" (host to device) or "d2h"

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", KERNEL if self.native else FALLBACK)
        if self.kind not in KINDS:
            raise ValueError(f"DeviceOpEvent kind {self.kind!r} is not one of {KINDS}")
        if self.duration_ns < 0:
            raise ValueError(f"DeviceOpEvent {self.name!r} has a negative duration {self.duration_ns}")

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


# The device clock's record kinds (neuronsim/device/clock.py ClockEvent.kind).
_OP_START = "launch"
_FALLBACK_PARTS = ("to_host", "to_device")
_TRANSFER_KINDS = ("h2d", "d2h")


def from_clock_events(records: Iterable[Any]) -> list[DeviceOpEvent]:
    """Group a device clock's records (launch, kernel, to_host, to_device, h2d, d2h, collective) into ops.

    Duck-typed on ``name, kind, start_ns, duration_ns, native, bytes`` (and, when the clock
    records them, ``kernel`` — a KernelRun or ``Prepared`` — and ``wall_ns``). A ``launch`` starts
    an op; the records right after it with the same name and a contiguous start belong to it.
    One pass, no per-record objects but the ops: profiles read every op of long runs.
    """
    ops: list[DeviceOpEvent] = []
    runs: dict[int, KernelRun] = {}  # id(prepared) -> its KernelRun, built once per Program
    # the op being grouped: name, start, duration, native, bytes, launch, wall, signature, kernel
    cur: list | None = None

    def flush() -> None:
        name, start, duration, native, nbytes, launch, wall, signature, kernel = cur
        ops.append(DeviceOpEvent(name, start, duration, native, "", nbytes, launch_ns=launch, kernel=kernel,
                                 wall_ns=wall, signature=signature))

    for rec in records:
        kind, name = rec.kind, rec.name
        start, duration = float(rec.start_ns), float(rec.duration_ns)
        if kind in _TRANSFER_KINDS or kind == COLLECTIVE:
            if cur is not None:
                flush()
                cur = None
            transfer = kind != COLLECTIVE
            ops.append(DeviceOpEvent(name, start, duration, not transfer,
                                     TRANSFER if transfer else COLLECTIVE, int(rec.bytes),
                                     wall_ns=getattr(rec, "wall_ns", None),
                                     signature=tuple(getattr(rec, "signature", ())),
                                     direction=kind if transfer else ""))
            continue
        if (cur is None or kind == _OP_START or name != cur[0]
                or abs(cur[1] + cur[2] - start) > 1e-6 * max(1.0, start)):
            if cur is not None:
                flush()
            cur = [name, start, 0.0, bool(rec.native), 0, 0.0, getattr(rec, "wall_ns", None),
                   tuple(getattr(rec, "signature", ())), None]
        cur[2] += duration
        cur[4] += int(rec.bytes)
        if kind == _OP_START:
            cur[5] += duration
        kernel = getattr(rec, "kernel", None)
        if kernel is not None:
            run = runs.get(id(kernel))
            if run is None:
                run = kernel if isinstance(kernel, KernelRun) else KernelRun.from_prepared(kernel)
                runs[id(kernel)] = run
            cur[8] = run
    if cur is not None:
        flush()
    return ops
