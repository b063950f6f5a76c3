"""The summary metrics, in Neuron Explorer's names and units — the one place they are computed.

A kernel's summary comes from its Program, Timeline, ChipSpec and Placement
(:func:`kernel_summary`); a run of many kernels and host fallbacks is the merge of its op
summaries (:func:`merge_summaries`, :func:`device_summary`). Definitions:

- ``total_time``: seconds on the device. A kernel: from its start to its last instruction's end.
  A device run: the device clock's span (launch overheads and host round trips included).
- ``<engine>_engine_active_time``: seconds during which the engine had at least one instruction in
  flight (the union of its instructions' spans, issue to results landed, and of the steps run before
  them on it: TensorE's LoadStationary, ScalarE's activation-table loads, DMA triggers);
  ``dma_active_time`` is the union of the transfers' spans (first packet to last) over every DMA
  queue. ``*_active_time_percent`` is that time over ``total_time``, times 100.
  ``<engine>_engine_instruction_time`` is the plain sum of those spans (overlaps added), and
  ``<engine>_engine_instruction_count`` counts them (an nc_matmul is two, as Explorer counts it).
- ``model_flops``: ``2*K*M*N`` per ``nc_matmul`` (K partitions contracted, M stationary columns,
  N moving columns). ``transpose_flops``: a TensorE ``nc_transpose`` of ``P x F`` data is an
  identity matmul, ``2*P*F*P``. ``hardware_flops`` = model + transpose FLOPs: what the PE array did.
- ``mfu_estimated_percent`` = ``model_flops / (chip.tensor_engine_peak_flops_bf16 * total_time) * 100``;
  ``hfu_estimated_percent`` the same with ``hardware_flops``.
- ``hbm_read_bytes`` / ``hbm_write_bytes``: DMA traffic out of / into HBM (each side at its own
  dtype); ``dma_transfer_*``: every DMA instruction, bytes moved = the wider side of the copy.
- ``sbuf_peak_bytes`` / ``psum_peak_bytes``: the highest allocated byte of a partition times the
  partitions, from the placement (merged: the maximum over kernels).
- ``host_fallback_time``: seconds the device spent on ops computed by the host (launch + round trip).

Nothing here imports torch; the simulator is imported only when a Program is summarized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from neuronsim.profiler.events import (
    FALLBACK,
    KERNEL,
    TRANSFER,
    DeviceOpEvent,
    KernelRun,
    PlacedRun,
)

if TYPE_CHECKING:
    from neuronsim.sim.chips import ChipSpec
    from neuronsim.sim.ir import Program
    from neuronsim.sim.memory.layout import Placement
    from neuronsim.sim.schedule import Timeline

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")  # Explorer's per-engine field prefixes

# Fields that add up over kernels, fields that take the maximum, and fields derived from others.
ADDITIVE = (
    *(f"{e}_engine_active_time" for e in ENGINES),
    *(f"{e}_engine_instruction_time" for e in ENGINES),
    *(f"{e}_engine_instruction_count" for e in ENGINES),
    "dma_active_time", "instruction_count", "matmul_instruction_count", "transpose_instruction_count",
    "model_flops", "transpose_flops", "hardware_flops",
    "hbm_read_bytes", "hbm_write_bytes", "dma_transfer_count", "dma_transfer_total_bytes",
    "kernel_count", "kernel_launch_time", "host_fallback_time", "host_fallback_count",
    "host_transfer_time", "host_transfer_count", "host_transfer_bytes",
)
PEAK = ("sbuf_peak_bytes", "psum_peak_bytes", "dma_queue_count", "neuroncore_count")
DERIVED = (
    *(f"{e}_engine_active_time_percent" for e in ENGINES),
    "dma_active_time_percent", "dma_transfer_average_bytes", "mfu_estimated_percent",
    "hfu_estimated_percent", "host_fallback_time_percent",
)
TIME_FIELDS = frozenset(f for f in ADDITIVE if f.endswith("_time")) | {"total_time"}
FIELDS = ("total_time", *ADDITIVE, *PEAK, *DERIVED)
_INT_FIELDS = frozenset(f for f in FIELDS if f.endswith(("_count", "_bytes", "_flops")))


def union_ns(start_ns: np.ndarray, end_ns: np.ndarray) -> float:
    """Length of the union of intervals ``[start, end)``."""
    n = start_ns.size
    if n == 0:
        return 0.0
    order = np.argsort(start_ns, kind="stable")
    s = start_ns[order]
    reach = np.maximum.accumulate(end_ns[order])
    new = np.empty(n, bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, n - 1)
    return float((reach[last] - s[first]).sum())


def empty_summary() -> dict:
    return {f: (0 if f in _INT_FIELDS else 0.0) for f in FIELDS}


def kernel_summary(program: Program, timeline: Timeline, chip: ChipSpec, placement: Placement) -> dict:
    """The Explorer-named summary of one scheduled Program (see the module docstring)."""
    from neuronsim.sim.engines.dma import transfer_bytes
    from neuronsim.sim.ir import DMA_OPS, Engine, Memory, Opcode
    from neuronsim.sim.schedule import DMA_TRACK0

    s = empty_summary()
    s["total_time"] = timeline.total_ns * 1e-9
    s["kernel_count"] = 1
    s["neuroncore_count"] = 1
    s["instruction_count"] = len(program.instructions)
    _, track, _, start, end = timeline.events()  # every drawn span: main steps and the steps before them
    for engine in ENGINES:
        mask = track == int(Engine[engine.upper()])
        s[f"{engine}_engine_active_time"] = union_ns(start[mask], end[mask]) * 1e-9
        s[f"{engine}_engine_instruction_time"] = float((end[mask] - start[mask]).sum()) * 1e-9
        s[f"{engine}_engine_instruction_count"] = int(mask.sum())
    dma = track >= DMA_TRACK0
    s["dma_active_time"] = union_ns(start[dma], end[dma]) * 1e-9
    s["dma_queue_count"] = int(np.unique(track[dma]).size)
    for ins in program.instructions:
        if ins.opcode is Opcode.NC_MATMUL:
            stationary, moving = ins.srcs
            flops = 2 * stationary.partitions * stationary.free_size * moving.free_size
            if ins.imm.get("is_transpose"):  # a matmul against an identity moves data, not model math
                s["transpose_instruction_count"] += 1
                s["transpose_flops"] += flops
            else:
                s["matmul_instruction_count"] += 1
                s["model_flops"] += flops
        elif ins.opcode is Opcode.NC_MATMUL_MX:  # each x4 element holds 4 contraction values
            stationary, moving = ins.srcs[0], ins.srcs[1]
            s["matmul_instruction_count"] += 1
            s["model_flops"] += 2 * 4 * stationary.partitions * stationary.free_size * moving.free_size
        elif ins.opcode is Opcode.NC_TRANSPOSE and ins.engine is Engine.TENSOR:
            data = ins.srcs[0]
            s["transpose_instruction_count"] += 1
            s["transpose_flops"] += 2 * data.partitions * data.free_size * data.partitions
        elif ins.opcode in DMA_OPS:
            dst = ins.dst
            s["dma_transfer_count"] += 1
            s["dma_transfer_total_bytes"] += transfer_bytes(ins)
            reads = ins.srcs if ins.opcode is Opcode.DMA_COMPUTE else ins.srcs[:1]  # not its offsets
            s["hbm_read_bytes"] += sum(src.nbytes for src in reads if src.memory is Memory.HBM)
            if dst.memory is Memory.HBM:
                s["hbm_write_bytes"] += dst.nbytes
    s["hardware_flops"] = s["model_flops"] + s["transpose_flops"]
    s["sbuf_peak_bytes"] = int(placement.sbuf_peak_bytes)
    s["psum_peak_bytes"] = int(placement.psum_peak_bytes)
    return derive(s, chip)


def summarize(run: KernelRun) -> dict:
    return kernel_summary(run.program, run.timeline, run.chip, run.placement)


def derive(s: dict, chip: ChipSpec) -> dict:
    """Fill the derived fields (percents, averages, MFU) from the others; returns ``s``.

    Over ``neuroncore_count`` cores, active times are summed over the cores, so percents are of
    ``total_time * cores`` (the average core) and the peak FLOP/s is ``cores`` times one core's."""
    cores = max(1, int(s.get("neuroncore_count") or 1))
    total = s["total_time"] * cores

    def pct(x: float) -> float:
        return 100.0 * x / total if total > 0 else 0.0

    for engine in ENGINES:
        s[f"{engine}_engine_active_time_percent"] = pct(s[f"{engine}_engine_active_time"])
    s["dma_active_time_percent"] = pct(s["dma_active_time"])
    count = s["dma_transfer_count"]
    s["dma_transfer_average_bytes"] = s["dma_transfer_total_bytes"] / count if count else 0.0
    s["host_fallback_time_percent"] = pct(s["host_fallback_time"] * cores)
    peak = chip.tensor_engine_peak_flops_bf16 * cores
    time = s["total_time"]
    s["mfu_estimated_percent"] = 100.0 * s["model_flops"] / (peak * time) if time > 0 else 0.0
    s["hfu_estimated_percent"] = 100.0 * s["hardware_flops"] / (peak * time) if time > 0 else 0.0
    return s


def merge_summaries(summaries: Iterable[Mapping], chip: ChipSpec, *, total_time: float | None = None,
                    host_fallback_time: float = 0.0, host_fallback_count: int = 0) -> dict:
    """Merge summaries of kernels that ran one after another on one core.

    Additive fields add up (kernels on one core do not overlap, so the sum of their engines'
    active times is the union), peaks take the maximum, derived fields are recomputed.
    ``total_time`` defaults to the sum of the kernels' times; a device run passes its clock's span.
    """
    merged = empty_summary()
    for s in summaries:
        for f in ADDITIVE:
            merged[f] += s.get(f, 0)
        for f in PEAK:
            merged[f] = max(merged[f], s.get(f, 0))
        if total_time is None:
            merged["total_time"] += s.get("total_time", 0.0)
    if total_time is not None:
        merged["total_time"] = float(total_time)
    merged["host_fallback_time"] += host_fallback_time
    merged["host_fallback_count"] += host_fallback_count
    merged["neuroncore_count"] = max(1, merged["neuroncore_count"])
    return derive(merged, chip)


def launch_summary(placed: Sequence[PlacedRun], chip: ChipSpec, cores: int | None = None) -> dict:
    """The summary of one launch: kernel runs placed on ``cores`` physical cores (an SPMD grid,
    phases separated by barriers). ``total_time`` is from the first start to the last end;
    ``neuroncore_count`` is ``cores`` (default: the cores used)."""
    placed = list(placed)
    cores = cores or len({p.core for p in placed}) or 1
    cache: dict = {}
    parts = []
    for p in placed:
        key = id(p.run.timeline)
        if key not in cache or cache[key][0] is not p.run.timeline:
            cache[key] = (p.run.timeline, summarize(p.run))
        parts.append(cache[key][1])
    start = min((p.offset_ns for p in placed), default=0.0)
    end = max((p.end_ns for p in placed), default=0.0)
    s = merge_summaries(parts, chip, total_time=(end - start) * 1e-9)
    s["neuroncore_count"] = cores
    return derive(s, chip)


def _native_op_summary(event: DeviceOpEvent, cache: dict) -> dict:
    """A native op's own summary, launch excluded: its kernel's (computed once per Program
    schedule, kept in ``cache``), or what the event itself says. Shared: do not modify."""
    kernel = event.kernel
    if kernel is not None:
        key = id(kernel.timeline)
        hit = cache.get(key)
        if hit is None or hit[0] is not kernel.timeline:
            hit = cache[key] = (kernel.timeline, summarize(kernel))
        return hit[1]
    s = empty_summary()
    s["kernel_count"] = 1
    busy_ns = event.engine_busy_ns or {}
    for engine in ENGINES:
        busy = float(busy_ns.get(engine, 0.0)) * 1e-9
        s[f"{engine}_engine_active_time"] = s[f"{engine}_engine_instruction_time"] = busy
    s["dma_active_time"] = float(busy_ns.get("dma", 0.0)) * 1e-9
    s["model_flops"] = s["hardware_flops"] = int(event.flops)
    return s


def device_summary(events: Iterable[DeviceOpEvent], chip: ChipSpec, cache: dict | None = None) -> dict:
    """The summary of a device run: its native ops' summaries merged, plus host fallbacks/copies.

    Linear in the ops and cheap per op: a run repeats few Programs many times, so each distinct
    kernel is summarized once and its additive fields are added times its count. ``cache`` (see
    :func:`op_table`) shares the kernel summaries between calls."""
    events = events if isinstance(events, Sequence) else list(events)
    cache = {} if cache is None else cache
    counts: dict[int, list] = {}  # id(timeline) -> [an event of that kernel, count]
    s = empty_summary()
    launch_ns = fallback_ns = transfer_ns = 0.0
    first, last = float("inf"), float("-inf")
    for e in events:
        start = e.start_ns
        if start < first:
            first = start
        if start + e.duration_ns > last:
            last = start + e.duration_ns
        kind = e.kind
        if kind == KERNEL:
            launch_ns += e.launch_ns
            if e.kernel is not None:
                hit = counts.get(id(e.kernel.timeline))
                if hit is None:
                    counts[id(e.kernel.timeline)] = [e, 1]
                else:
                    hit[1] += 1
            else:
                _accumulate(s, _native_op_summary(e, cache), 1)
        elif kind == FALLBACK:
            fallback_ns += e.duration_ns
            s["host_fallback_count"] += 1
        elif kind == TRANSFER:
            transfer_ns += e.duration_ns
            s["host_transfer_count"] += 1
            s["host_transfer_bytes"] += int(e.bytes)
    for e, n in counts.values():
        _accumulate(s, _native_op_summary(e, cache), n)
    s["total_time"] = (last - first) * 1e-9 if events else 0.0
    s["kernel_launch_time"] += launch_ns * 1e-9
    s["host_fallback_time"] += fallback_ns * 1e-9
    s["host_transfer_time"] += transfer_ns * 1e-9
    s["neuroncore_count"] = max(1, s["neuroncore_count"])
    return derive(s, chip)


def _accumulate(into: dict, s: Mapping, times: int) -> None:
    """``times`` runs of an op summarized by ``s``, one after another on one core (see
    :func:`merge_summaries`)."""
    for f in ADDITIVE:
        v = s.get(f, 0)
        if v:
            into[f] += v * times
    for f in PEAK:
        v = s.get(f, 0)
        if v > into[f]:
            into[f] = v


def op_table(events: Iterable[DeviceOpEvent], total_time: float | None = None,
             cache: dict | None = None) -> list[dict]:
    """One row per (op name, kind): count, device seconds, share of the total, FLOPs, bytes.
    ``cache``: kernel summaries by Program schedule, shared with :func:`device_summary`."""
    rows: dict[tuple[str, str], list] = {}  # (name, kind) -> [count, ns, model_flops, bytes]
    cache = {} if cache is None else cache
    for e in events:
        row = rows.get((e.name, e.kind))
        if row is None:
            row = rows[(e.name, e.kind)] = [0, 0.0, 0, 0]
        row[0] += 1
        row[1] += e.duration_ns
        row[3] += e.bytes
        if e.kind == KERNEL:
            row[2] += _native_op_summary(e, cache)["model_flops"]
    span = sum(row[1] for row in rows.values()) * 1e-9
    total = span if total_time is None else total_time
    table = []
    for (name, kind), (count, ns, flops, nbytes) in rows.items():
        seconds = ns * 1e-9
        table.append({
            "name": name, "kind": kind, "native": kind == KERNEL, "count": count, "total_time": seconds,
            "model_flops": int(flops), "bytes": int(nbytes), "average_time": seconds / count,
            "total_time_percent": 100.0 * seconds / total if total > 0 else 0.0,
        })
    table.sort(key=lambda r: (-r["total_time"], r["name"]))
    return table


def fallback_ops(events: Iterable[DeviceOpEvent]) -> dict[str, int]:
    """Host-fallback op names with how often each ran, most frequent first."""
    counts = Counter(e.name for e in events if e.kind == FALLBACK)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
