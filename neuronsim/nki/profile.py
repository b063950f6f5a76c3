"""The profile of a simulated kernel run: a Neuron Explorer summary and the instruction timeline.

``summary`` has Neuron Explorer's field names and units (seconds, bytes, percent), computed by
:mod:`neuronsim.profiler.summary` (the one definition of the metrics): per-engine active time, its
share of ``total_time`` and instruction count; DMA active time (any queue moving data), transfer
counts and bytes, HBM bytes read and written; ``model_flops`` (``2*M*N*K`` over the matmuls that
are not transposes) and ``mfu_estimated_percent`` against the chip's dense bf16 peak;
``sbuf_peak_bytes`` / ``psum_peak_bytes`` (highest allocated byte times the partitions).

For a launch grid, instances are laid out on their physical cores (see ``simulate``): times are
wall-clock, and percentages and MFU are averages over the cores used (``neuroncore_count``).
"""

from __future__ import annotations

from dataclasses import dataclass

from neuronsim.nki.traced import TracedKernel
from neuronsim.profiler import session
from neuronsim.profiler.events import KernelRun, PlacedRun
from neuronsim.profiler.summary import ENGINES, kernel_summary, merge_summaries
from neuronsim.sim.ir import Engine
from neuronsim.sim.schedule import DMA_TRACK0, PRE_EVENT_NAMES


@dataclass(frozen=True)
class TimelineEntry:
    """One instruction as it ran: engine, start and end (seconds: issue to results landed), and the
    kernel line that made it. A step an instruction runs first is an entry of its own, just before
    it: ``LOAD_STATIONARY`` (nc_matmul), ``ACT_TABLE_LOAD`` (activation), ``DMA_TRIGGER``."""

    engine: str  # tensor | vector | scalar | gpsimd | sync | dma
    start: float
    end: float
    opcode: str
    location: str | None
    name: str | None = None
    queue: int | None = None  # DMA queue
    instance: int = 0  # SPMD instance
    core: int = 0  # physical core
    phase: int = 0  # core_barrier phase

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Profile:
    kernel: str
    chip: str
    summary: dict
    timeline: list[TimelineEntry]

    def by_engine(self, engine: str) -> list[TimelineEntry]:
        return [e for e in self.timeline if e.engine == engine]

    def by_location(self) -> dict[str, float]:
        """Busy seconds per kernel line, summed over engines."""
        out: dict[str, float] = {}
        for e in self.timeline:
            out[e.location or "?"] = out.get(e.location or "?", 0.0) + e.duration
        return out

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<Profile {self.kernel} on {self.chip}: {s['total_time'] * 1e6:.2f} us, "
            f"{len(self.timeline)} instructions>"
        )


def layout(runs, chip, phase_ns=None) -> list[tuple[int, int, int, float, object]]:
    """Where each run of a launch went: (phase, instance, core, offset_ns, RunResult).

    Instance ``i`` of a phase runs on core ``i % n_cores`` (``n_cores`` = min(instances, the
    chip's LNC width)), instances on one core back to back; a phase starts when the last core has
    finished the one before (``core_barrier``).
    """
    n_inst = len(runs[0]) if runs else 0
    n_cores = max(1, min(n_inst, chip.default_lnc))
    placed = []
    t0 = 0.0
    for phase, row in enumerate(runs):
        core_time = [0.0] * n_cores
        for i, result in enumerate(row):
            core = i % n_cores
            placed.append((phase, i, core, t0 + core_time[core], result))
            core_time[core] += result.timeline.total_ns
        t0 += max(core_time) if phase_ns is None else phase_ns[phase]
    return placed


def build_profile(traced: TracedKernel, runs, phase_ns=None) -> Profile:
    """The profile of one run: ``runs[phase][instance]`` RunResults laid out on the cores
    (``phase_ns``: each phase's length when other ranks set it, see ``ranks.py``)."""
    chip = traced.chip
    timeline: list[TimelineEntry] = []
    summaries = []
    placed = layout(runs, chip, phase_ns)
    n_cores = max(1, min(len(traced.instances), chip.default_lnc))
    wall_ns = 0.0
    for phase, i, core, offset, result in placed:
        tl = result.timeline
        prog = result.prepared.program
        summaries.append(kernel_summary(prog, tl, chip, result.prepared.placement))
        wall_ns = max(wall_ns, offset + tl.total_ns)
        starts = (tl.start_ns + offset) * 1e-9
        ends = (tl.done_ns + offset) * 1e-9  # an instruction's bar ends when its results land
        for k, ins in enumerate(prog.instructions):
            track = int(tl.track[k])
            dma = ins.engine is Engine.DMA
            if tl.pre_track[k] >= 0:  # the step before: LoadStationary, table load, DMA trigger
                timeline.append(TimelineEntry(
                    ENGINES[int(tl.pre_track[k])], float((tl.pre_start_ns[k] + offset) * 1e-9),
                    float((tl.pre_done_ns[k] + offset) * 1e-9), PRE_EVENT_NAMES[ins.opcode], ins.location,
                    ins.name, None, i, core, phase))
            timeline.append(
                TimelineEntry(
                    "dma" if dma else ENGINES[track],
                    float(starts[k]),
                    float(ends[k]),
                    ins.opcode.name,
                    ins.location,
                    ins.name,
                    track - DMA_TRACK0 if dma else None,
                    i,
                    core,
                    phase,
                )
            )
    wall = max(wall_ns, sum(phase_ns or ())) * 1e-9  # a rank waiting for the others ends with them
    # Percentages and MFU average over the cores used: derive against n_cores x wall-clock time.
    summary = merge_summaries(summaries, chip, total_time=wall * n_cores)
    summary["total_time"] = wall
    summary["neuroncore_count"] = n_cores
    return Profile(traced.name, chip.name, summary, timeline)


def record_launch(traced: TracedKernel, runs, issued_ns: int) -> None:
    """Hand the launch to the profiler: recorded if a session is (``neuronsim profile``)."""
    if session.active() is None:
        return
    placed = [
        PlacedRun(KernelRun.from_prepared(result.prepared), core, offset)
        for _phase, _i, core, offset, result in layout(runs, traced.chip)
    ]
    session.record_launch(placed, traced.name, issued_ns)
