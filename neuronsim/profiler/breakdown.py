"""Where each op's device time went: engine active time and DMA transfer sizes, per op and overall.

The summary (``summary.py``) says how busy each engine was over the whole run; the report also
needs to say *which ops* made it so — to draw the DMA-size chart, to name the ops behind a
recommendation, and to compare two profiles op by op. Per kernel Program schedule the numbers are
computed once (a run repeats few Programs many times) and multiplied by the op's count.

DMA sizes are bucketed in powers of four from 512 bytes; ``SMALL_DMA_BYTES`` is Neuron Explorer's
target average DMA size (>= 32 KiB: below it the fixed cost per transfer dominates).
Nothing here imports torch; the simulator is imported only when a Program is read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from neuronsim.profiler import summary as S
from neuronsim.profiler.events import FALLBACK, KERNEL, DeviceOpEvent, KernelRun

SMALL_DMA_BYTES = 32 * 1024
DMA_SIZE_EDGES = (512, 2048, 8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024)  # bucket upper bounds (exclusive)
ENGINE_KEYS = (*S.ENGINES, "dma")
TOP_LOCATIONS = 5  # kernel lines kept per op for "which line issued the small DMAs"


def dma_size_labels() -> list[str]:
    from neuronsim.profiler.units import fmt_bytes_short

    edges = DMA_SIZE_EDGES
    labels = [f"< {fmt_bytes_short(edges[0])}"]
    pairs = zip(edges, edges[1:], strict=False)
    labels += [f"{fmt_bytes_short(lo)}–{fmt_bytes_short(hi)}" for lo, hi in pairs]
    labels.append(f"≥ {fmt_bytes_short(edges[-1])}")
    return labels


def dma_bucket(nbytes: int) -> int:
    for i, edge in enumerate(DMA_SIZE_EDGES):
        if nbytes < edge:
            return i
    return len(DMA_SIZE_EDGES)


@dataclass
class OpStats:
    """Engine seconds and DMA transfers of one op (all its calls), or of a whole run."""

    engine_active_time: dict = field(default_factory=lambda: dict.fromkeys(ENGINE_KEYS, 0.0))
    dma_count: list = field(default_factory=lambda: [0] * (len(DMA_SIZE_EDGES) + 1))
    dma_bytes: list = field(default_factory=lambda: [0] * (len(DMA_SIZE_EDGES) + 1))
    small_dma_locations: Counter = field(default_factory=Counter)

    def add(self, other: OpStats, times: int = 1) -> None:
        for k, v in other.engine_active_time.items():
            self.engine_active_time[k] += v * times
        for i in range(len(self.dma_count)):
            self.dma_count[i] += other.dma_count[i] * times
            self.dma_bytes[i] += other.dma_bytes[i] * times
        for loc, n in other.small_dma_locations.items():
            self.small_dma_locations[loc] += n * times

    @property
    def dma_transfer_count(self) -> int:
        return sum(self.dma_count)

    @property
    def small_dma_count(self) -> int:
        return sum(self.dma_count[: dma_bucket(SMALL_DMA_BYTES - 1) + 1])

    def row_fields(self) -> dict:
        """What an op-table row carries (summary.json ``ops``)."""
        out = {
            "engine_active_time": {k: float(v) for k, v in self.engine_active_time.items()},
            "dma_transfer_count": self.dma_transfer_count,
            "dma_small_transfer_count": self.small_dma_count,
            "dma_transfer_total_bytes": int(sum(self.dma_bytes)),
        }
        if self.small_dma_locations:
            top = self.small_dma_locations.most_common(TOP_LOCATIONS)
            out["dma_small_transfer_locations"] = {loc: int(n) for loc, n in top}
        return out


def kernel_stats(run: KernelRun, cache: dict) -> OpStats:
    """One run of a kernel (cached per Program schedule in ``cache``; do not modify the result)."""
    key = id(run.timeline)
    hit = cache.get(key)
    if hit is not None and hit[0] is run.timeline:
        return hit[1]
    from neuronsim.sim.engines.dma import transfer_bytes
    from neuronsim.sim.ir import DMA_OPS

    fields = S.summarize(run)
    stats = OpStats()
    for engine in S.ENGINES:
        stats.engine_active_time[engine] = fields[f"{engine}_engine_active_time"]
    stats.engine_active_time["dma"] = fields["dma_active_time"]
    fallback_location = run.program.location or "<unknown>"
    for ins in run.program.instructions:
        if ins.opcode in DMA_OPS:
            nbytes = transfer_bytes(ins)
            b = dma_bucket(nbytes)
            stats.dma_count[b] += 1
            stats.dma_bytes[b] += nbytes
            if nbytes < SMALL_DMA_BYTES:
                stats.small_dma_locations[ins.location or fallback_location] += 1
    cache[key] = (run.timeline, stats)
    return stats


def _event_stats(e: DeviceOpEvent) -> OpStats:
    """A native op without a kernel timeline: what the event says about its engines."""
    stats = OpStats()
    for k in ENGINE_KEYS:
        stats.engine_active_time[k] = float((e.engine_busy_ns or {}).get(k, 0.0)) * 1e-9
    return stats


@dataclass
class Breakdown:
    """Per (op name, kind) stats, and the whole run's."""

    ops: dict = field(default_factory=dict)  # (name, kind) -> OpStats
    total: OpStats = field(default_factory=OpStats)

    def op(self, name: str, kind: str) -> OpStats:
        stats = self.ops.get((name, kind))
        if stats is None:
            stats = self.ops[(name, kind)] = OpStats()
        return stats

    def add(self, name: str, kind: str, stats: OpStats, times: int = 1) -> None:
        self.op(name, kind).add(stats, times)
        self.total.add(stats, times)

    def add_device_events(self, events: Iterable[DeviceOpEvent], cache: dict) -> None:
        counts: dict = {}  # (name, id(timeline)) -> [event, count]: each kernel's stats added once
        for e in events:
            if e.kind == FALLBACK:
                self.op(e.name, e.kind)
            if e.kind != KERNEL:
                continue
            if e.kernel is None:
                self.add(e.name, e.kind, _event_stats(e))
                continue
            hit = counts.setdefault((e.name, id(e.kernel.timeline)), [e, 0])
            hit[1] += 1
        for e, n in counts.values():
            self.add(e.name, e.kind, kernel_stats(e.kernel, cache), n)

    def add_runs(self, name: str, kind: str, runs: Sequence[KernelRun], cache: dict) -> None:
        for run in runs:
            self.add(name, kind, kernel_stats(run, cache))

    def dma_sizes(self) -> dict:
        """The DMA-size histogram of the whole run (summary.json ``dma_sizes``)."""
        return {"edges_bytes": list(DMA_SIZE_EDGES), "labels": dma_size_labels(),
                "count": list(self.total.dma_count), "bytes": [int(b) for b in self.total.dma_bytes],
                "small_below_bytes": SMALL_DMA_BYTES}


def enrich_op_rows(rows: Sequence[Mapping], breakdown: Breakdown) -> list[dict]:
    """The op table with each row's engine and DMA figures added (rows the breakdown does not
    know — a kernel's opcode rows — are returned as they are)."""
    out = []
    for r in rows:
        row = dict(r)
        stats = breakdown.ops.get((row.get("name"), row.get("kind")))
        if stats is not None:
            row.update(stats.row_fields())
        out.append(row)
    return out


def opcode_breakdown(runs: Sequence[KernelRun], cache: dict) -> Breakdown:
    """A single kernel's profile: its whole-run DMA sizes (op rows are opcodes, one engine each)."""
    b = Breakdown()
    for run in runs:
        b.total.add(kernel_stats(run, cache))
    return b
