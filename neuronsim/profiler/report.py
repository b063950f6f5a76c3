"""A profile directory: ``trace.json``, ``summary.json``, ``ops.csv`` — built, written, read back.

``summary.json`` holds the Explorer-named fields at the top level (see ``summary.py``) plus
``ops`` (the op table: device ops, or a kernel's opcodes), ``fallback_ops``, ``recommendations``,
``trace`` (what the trace holds and what it aggregated), ``chip``, ``detail`` and ``kernels``.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from neuronsim.profiler import summary as S
from neuronsim.profiler.events import DeviceOpEvent, KernelRun, PlacedRun
from neuronsim.profiler.trace import (
    DEFAULT_MAX_INSTRUCTION_EVENTS,
    DEFAULT_MAX_OP_EVENTS,
    TraceBuilder,
    TraceStats,
    core_process_name,
    draw_device,
    draw_kernel,
    launch_trace,
    write_trace,
)

TRACE_FILE, SUMMARY_FILE, OPS_FILE, REPORT_FILE = "trace.json", "summary.json", "ops.csv", "report.html"
OPS_COLUMNS = (
    "name",
    "kind",
    "count",
    "total_time",
    "average_time",
    "total_time_percent",
    "model_flops",
    "bytes",
)

# Recommendation thresholds (Neuron Explorer's "average DMA size" target is >= 32 KiB).
DMA_BOUND_PERCENT = 60.0
SMALL_DMA_BYTES = 32 * 1024
FALLBACK_DOMINANT_PERCENT = 30.0
TENSOR_IDLE_PERCENT = 10.0


def opcode_table(runs: Sequence[KernelRun]) -> list[dict]:
    """A kernel's op table: one row per (opcode, engine), as Explorer's OpcodeSummary."""
    rows: dict = {}
    total = 0.0
    for run in runs:
        tl = run.timeline
        for i, ins in enumerate(run.program.instructions):
            key = (ins.opcode.name.lower(), ins.engine.name.lower())
            row = rows.setdefault(key, {"count": 0, "total_time": 0.0, "model_flops": 0, "bytes": 0})
            dur = float(tl.done_ns[i] - tl.start_ns[i]) * 1e-9
            row["count"] += 1
            row["total_time"] += dur
            total += dur
            if ins.opcode.name == "NC_MATMUL" and not ins.imm.get("is_transpose"):
                st, mv = ins.srcs
                row["model_flops"] += 2 * st.partitions * st.free_size * mv.free_size
            if ins.engine.name == "DMA":
                row["bytes"] += max(ins.dst.nbytes, ins.srcs[0].nbytes)
    table = [
        {
            "name": name,
            "kind": engine,
            **row,
            "average_time": row["total_time"] / row["count"],
            "total_time_percent": 100.0 * row["total_time"] / total if total else 0.0,
        }
        for (name, engine), row in rows.items()
    ]
    table.sort(key=lambda r: (-r["total_time"], r["name"]))
    return table


def recommendations(s: Mapping) -> list[dict]:
    """Explorer-style insight cards from a summary: DMA-bound, small DMAs, host fallbacks, TensorE idle."""
    out = []
    compute = {
        e: s.get(f"{e}_engine_active_time_percent", 0.0) for e in ("tensor", "vector", "scalar", "gpsimd")
    }
    busiest = max(compute, key=compute.get)
    dma = s.get("dma_active_time_percent", 0.0)
    if dma >= DMA_BOUND_PERCENT and dma > compute[busiest]:
        out.append(
            {
                "id": "dma_bound",
                "title": "DMA-bound",
                "detail": f"DMA queues were active {dma:.0f}% of the time; the busiest compute engine "
                f"({busiest}) {compute[busiest]:.0f}%. Overlap loads with compute (double "
                f"buffering) and keep data in SBUF across uses.",
            }
        )
    count, avg = s.get("dma_transfer_count", 0), s.get("dma_transfer_average_bytes", 0.0)
    if count and avg < SMALL_DMA_BYTES:
        out.append(
            {
                "id": "small_dma",
                "title": "Small DMA transfers",
                "detail": f"{count} transfers averaging {avg:,.0f} bytes; below "
                f"{SMALL_DMA_BYTES // 1024} KiB the fixed cost per transfer dominates. Move larger "
                f"tiles per dma_copy.",
            }
        )
    fb = s.get("host_fallback_time_percent", 0.0)
    if fb >= FALLBACK_DOMINANT_PERCENT:
        top = ", ".join(list(s.get("fallback_ops", {}))[:5])
        out.append(
            {
                "id": "host_fallbacks",
                "title": "Host fallbacks dominate",
                "detail": f"Ops computed on the host took {fb:.0f}% of device time "
                f"({s.get('host_fallback_count', 0)} calls{': ' + top if top else ''}). "
                f"Each pays a launch and a host round trip.",
            }
        )
    tensor = compute["tensor"]
    if s.get("total_time", 0.0) > 0 and tensor < TENSOR_IDLE_PERCENT:
        why = (
            "no matmul ran on it" if not s.get("model_flops") else f"it was active {tensor:.1f}% of the time"
        )
        out.append(
            {
                "id": "tensor_idle",
                "title": "TensorE idle",
                "detail": f"TensorE did little: {why} (MFU {s.get('mfu_estimated_percent', 0.0):.2f}%).",
            }
        )
    return out


def summary_document(
    fields: Mapping,
    *,
    chip: str,
    detail: str,
    ops: Sequence[Mapping] = (),
    fallback: Mapping[str, int] | None = None,
    trace_stats: Mapping | None = None,
    kernels: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> dict:
    doc = dict(fields)
    doc["fallback_ops"] = dict(fallback or {})
    doc.update(
        chip=chip,
        detail=detail,
        kernels=list(kernels),
        ops=[dict(r) for r in ops],
        trace=dict(trace_stats or {}),
        notes=list(notes),
    )
    doc["recommendations"] = recommendations(doc)
    return doc


def kernel_profile(
    placed: KernelRun | Sequence[PlacedRun],
    *,
    name: str | None = None,
    max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS,
) -> tuple[dict, dict]:
    """(summary document, trace) of one ``nki.simulate`` launch (or one kernel run)."""
    if isinstance(placed, KernelRun):
        placed = [PlacedRun(placed)]
    placed = list(placed)
    chip = placed[0].run.chip
    name = name or placed[0].run.program.name
    trace = launch_trace(placed, name=name, max_instruction_events=max_instruction_events)
    fields = S.launch_summary(placed, chip)
    doc = summary_document(
        fields,
        chip=chip.name,
        detail="instruction",
        ops=opcode_table([p.run for p in placed]),
        trace_stats=trace["otherData"]["neuronsim"],
        kernels=[name],
    )
    return doc, trace


def session_profile(session, devices: Mapping[int, Sequence[DeviceOpEvent]], chip, *,
                    host_base_ns: int | None = None,
                    max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS,
                    max_op_events: int = DEFAULT_MAX_OP_EVENTS, host_lane: bool = False) -> tuple[dict, dict]:
    """(summary document, device trace) of a profiled script: the ops of every device clock and
    the script's NKI launches.

    With ``host_base_ns`` (a torch.profiler export's ``baseTimeNanoseconds``) the trace is in that
    host time base, device ops aligned to when they were issued (see ``lane.py``), ready to be
    merged with the host trace (:func:`neuronsim.profiler.lane.merge_trace_text`); without, device
    ops are on the simulated timeline and launches follow them. ``host_lane`` (with
    ``host_base_ns``, typically ``session.started_wall_ns``) adds the host track drawn from the
    device ops' issue times (:func:`neuronsim.profiler.lane.draw_host_ops`) and makes the trace a
    host-time one on its own (``baseTimeNanoseconds``), as torch.profiler's exports are.
    """
    detail = session.detail
    stats = TraceStats(max_instruction_events, max_op_events)
    in_host_time = host_base_ns is not None
    origin = host_base_ns if in_host_time else session.started_wall_ns
    b = TraceBuilder(stats=stats)
    summaries, tables, fallback, cache = [], [], {}, {}
    host_slices = 0
    if host_lane and in_host_time:
        from neuronsim.profiler.lane import draw_host_ops

        host_slices = draw_host_ops(b, devices, session.started_wall_ns, origin)
    for device, events in sorted(devices.items()):
        draw_device(b, events, chip_name=chip.name, device=device, detail=detail,
                    base_time_ns=session.started_wall_ns, origin_ns=origin,
                    hta=in_host_time)
        summaries.append(S.device_summary(events, chip, cache))
        tables += S.op_table(events, cache=cache)
        for k, v in S.fallback_ops(events).items():
            fallback[k] = fallback.get(k, 0) + v
    launch_pid = 500
    cursor = max((e.end_ns for evs in devices.values() for e in evs), default=0.0)
    for launch in session.launches:
        fields = S.launch_summary(launch.placed, chip)
        summaries.append(fields)
        tables.append({"name": launch.name, "kind": "nki.simulate", "count": 1,
                       "total_time": fields["total_time"], "model_flops": fields["model_flops"],
                       "bytes": fields["dma_transfer_total_bytes"]})
        start = float(launch.wall_ns - origin) if in_host_time else cursor
        cursor = start + launch.total_ns
        for p in launch.placed:
            pid = launch_pid + p.core
            b.process(pid, core_process_name(p.core, chip.name, "nki.simulate"), sort_index=pid)
            b.thread(pid, 1, "Kernel")
            b.slice(pid, 1, launch.name, start + p.offset_ns, start + p.end_ns, "kernel",
                    {"core": p.core, "instructions": len(p.run.timeline)})
            draw_kernel(b, p.run, pid, start + p.offset_ns)
    fields = _combine(summaries, chip)
    ops = _merge_rows(tables, fields["total_time"])
    trace = b.build(chip=chip.name, detail=detail)
    if host_lane and in_host_time:
        trace["baseTimeNanoseconds"] = origin
        trace["otherData"]["neuronsim"]["host_op_events"] = host_slices
    notes = list(session.notes)
    if detail == "instruction" and devices and not any(e.kernel for evs in devices.values() for e in evs):
        notes.append("instruction detail: the device ops carry no kernel timelines yet, so only op slices "
                     "are drawn for them")
    doc = summary_document(fields, chip=chip.name, detail=detail, ops=ops, fallback=fallback,
                           trace_stats=trace["otherData"]["neuronsim"],
                           kernels=[launch.name for launch in session.launches], notes=notes)
    return doc, trace


def _combine(summaries: list[dict], chip) -> dict:
    if len(summaries) == 1:
        return summaries[0]
    if not summaries:
        return S.derive(S.empty_summary(), chip)
    # Several clocks or launches: one after another on the device timeline.
    return S.merge_summaries(summaries, chip)


def _merge_rows(rows: list[dict], total: float) -> list[dict]:
    merged: dict = {}
    for r in rows:
        m = merged.setdefault(
            (r["name"], r["kind"]),
            {
                "name": r["name"],
                "kind": r["kind"],
                "count": 0,
                "total_time": 0.0,
                "model_flops": 0,
                "bytes": 0,
            },
        )
        for k in ("count", "total_time", "model_flops", "bytes"):
            m[k] += r.get(k, 0)
    out = []
    for m in merged.values():
        m["average_time"] = m["total_time"] / m["count"] if m["count"] else 0.0
        m["total_time_percent"] = 100.0 * m["total_time"] / total if total else 0.0
        out.append(m)
    out.sort(key=lambda r: (-r["total_time"], r["name"]))
    return out


def write_profile(out_dir: str | os.PathLike, doc: Mapping, trace: Mapping | str) -> Path:
    """Write the three files; ``trace`` is a trace dict or its JSON text (a merged host trace)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(trace, str):
        (out / TRACE_FILE).write_text(trace)
    else:
        write_trace(dict(trace), out / TRACE_FILE)
    (out / SUMMARY_FILE).write_text(json.dumps(doc, indent=1, default=float) + "\n")
    with open(out / OPS_FILE, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=OPS_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in doc.get("ops", []):
            w.writerow(row)
    return out


def load_summary(profile_dir: str | os.PathLike) -> dict:
    path = Path(profile_dir) / SUMMARY_FILE
    return json.loads(path.read_text())
