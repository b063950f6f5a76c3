"""The profile of a simulated kernel run: a Neuron Explorer summary and the instruction timeline.

``summary`` uses Neuron Explorer's field names and units (seconds, bytes, percent): per-engine
active time, its share of ``total_time`` and instruction count; DMA active time (any queue moving
data), transfer counts and bytes, HBM bytes read and written; ``model_flops`` (``2*M*N*K`` over
the non-transpose matmuls) and ``mfu_estimated_percent`` against the chip's dense bf16 peak; plus
``sbuf_peak_bytes`` / ``psum_peak_bytes`` (highest allocated byte, times the partitions).

For a launch grid, instances are laid out on their physical cores (see ``simulate``): times are
wall-clock, and the percentages are averages over the cores used.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuronsim.nki.kernel import TracedKernel
from neuronsim.sim.engines.dma import transfer_bytes
from neuronsim.sim.ir import Engine, Memory, Opcode
from neuronsim.sim.schedule import DMA_TRACK0

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


@dataclass(frozen=True)
class TimelineEntry:
    """One instruction as it ran: engine, start and end (seconds), and the kernel line that made it."""

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


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def build_profile(traced: TracedKernel, runs) -> Profile:
    chip = traced.chip
    n_inst = len(traced.instances)
    n_cores = max(1, min(n_inst, chip.default_lnc))
    timeline: list[TimelineEntry] = []
    busy = dict.fromkeys(ENGINES, 0.0)
    counts = dict.fromkeys(ENGINES, 0)
    dma_intervals = []
    dma_count = dma_bytes = hbm_read = hbm_write = matmuls = 0
    sbuf_peak = psum_peak = 0
    t0 = 0.0
    for phase, row in enumerate(runs):
        core_time = [0.0] * n_cores
        for i, result in enumerate(row):
            core = i % n_cores
            offset = t0 + core_time[core]
            tl = result.timeline
            prog = result.prepared.program
            placement = result.prepared.placement
            sbuf_peak = max(sbuf_peak, placement.sbuf_peak_bytes)
            psum_peak = max(psum_peak, placement.psum_peak_bytes)
            for k, ins in enumerate(prog.instructions):
                track = int(tl.track[k])
                start = (offset + float(tl.start_ns[k])) * 1e-9
                end = (offset + float(tl.end_ns[k])) * 1e-9
                if ins.engine is Engine.DMA:
                    engine, queue = "dma", track - DMA_TRACK0
                    dma_intervals.append((start, end))
                    dma_count += 1
                    dma_bytes += transfer_bytes(ins)
                    if ins.srcs[0].memory is Memory.HBM:
                        hbm_read += ins.srcs[0].nbytes
                    if ins.dst.memory is Memory.HBM:
                        hbm_write += ins.dst.nbytes
                else:
                    engine, queue = ENGINES[track], None
                    busy[engine] += end - start
                    counts[engine] += 1
                    if ins.opcode is Opcode.NC_MATMUL:
                        matmuls += 1
                timeline.append(
                    TimelineEntry(
                        engine, start, end, ins.opcode.name, ins.location, ins.name, queue, i, core, phase
                    )
                )
            core_time[core] += tl.total_ns
        t0 += max(core_time)
    total = t0 * 1e-9
    wall = total * n_cores
    model_flops = sum(inst.matmul_flops for inst in traced.instances)
    summary: dict = {"total_time": total}
    for e in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        summary[f"{e}_engine_active_time"] = busy[e]
        summary[f"{e}_engine_active_time_percent"] = 100.0 * busy[e] / wall if wall else 0.0
        summary[f"{e}_engine_instruction_count"] = counts[e]
    dma_active = _union_length(dma_intervals)
    peak = chip.tensor_engine_peak_flops_bf16 * n_cores
    summary.update(
        {
            "dma_active_time": dma_active,
            "dma_active_time_percent": 100.0 * dma_active / total if total else 0.0,
            "matmul_instruction_count": matmuls,
            "model_flops": model_flops,
            "transpose_flops": sum(inst.transpose_flops for inst in traced.instances),
            "mfu_estimated_percent": 100.0 * model_flops / (peak * total) if total else 0.0,
            "hbm_read_bytes": hbm_read,
            "hbm_write_bytes": hbm_write,
            "dma_transfer_count": dma_count,
            "dma_transfer_total_bytes": dma_bytes,
            "dma_transfer_average_bytes": dma_bytes / dma_count if dma_count else 0.0,
            "sbuf_peak_bytes": sbuf_peak,
            "psum_peak_bytes": psum_peak,
            "neuroncore_count": n_cores,
            "instruction_count": len(timeline),
        }
    )
    return Profile(traced.name, chip.name, summary, timeline)
