"""A profile directory: ``trace.json``, ``summary.json``, ``ops.csv`` — built, written, read back.

``summary.json`` holds the Explorer-named fields at the top level (see ``summary.py``) plus
``ops`` (the op table: device ops, or a kernel's opcodes; device ops and launches also carry their
``engine_active_time`` per engine and DMA transfer counts, see ``breakdown.py``), ``dma_sizes``
(the DMA-size histogram), ``fallback_ops``, ``recommendations`` (each naming the ops behind it, see
``advice.py``), ``trace`` (what the trace holds and what it aggregated), ``chip``, ``detail``,
``kernels`` and ``notes``.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from neuronsim.profiler import summary as S
from neuronsim.profiler.advice import recommendations
from neuronsim.profiler.breakdown import Breakdown, enrich_op_rows, opcode_breakdown
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
LAUNCH_KIND = "nki.simulate"  # the op-table kind of an NKI kernel launch
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
    breakdown: Breakdown | None = None,
) -> dict:
    """The summary.json document. With a ``breakdown`` the op rows carry their engine and DMA
    figures, ``dma_sizes`` is the run's DMA-size histogram and recommendations name their ops."""
    doc = dict(fields)
    doc["fallback_ops"] = dict(fallback or {})
    rows = enrich_op_rows(ops, breakdown) if breakdown is not None else [dict(r) for r in ops]
    doc.update(
        chip=chip,
        detail=detail,
        kernels=list(kernels),
        ops=rows,
        trace=dict(trace_stats or {}),
        notes=list(notes),
    )
    locations = {}
    if breakdown is not None:
        doc["dma_sizes"] = breakdown.dma_sizes()
        locations = dict(breakdown.total.small_dma_locations.most_common(10))
        doc["dma_sizes"]["small_transfer_locations"] = locations
    doc["recommendations"] = recommendations(doc, rows, locations)
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
        breakdown=opcode_breakdown([p.run for p in placed], {}),
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
    breakdown, stats_cache = Breakdown(), {}
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
        breakdown.add_device_events(events, stats_cache)
        for k, v in S.fallback_ops(events).items():
            fallback[k] = fallback.get(k, 0) + v
    launch_pid = 500
    cursor = max((e.end_ns for evs in devices.values() for e in evs), default=0.0)
    launches, notes = _launches_on(chip, session.launches)
    for launch in launches:
        fields = S.launch_summary(launch.placed, chip)
        summaries.append(fields)
        tables.append({"name": launch.name, "kind": LAUNCH_KIND, "count": 1,
                       "total_time": fields["total_time"], "model_flops": fields["model_flops"],
                       "bytes": fields["dma_transfer_total_bytes"]})
        breakdown.add_runs(launch.name, LAUNCH_KIND, [p.run for p in launch.placed], stats_cache)
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
    notes = list(session.notes) + notes
    if not devices and not launches:
        notes.append("nothing ran on the device: no device ops and no NKI kernel launches were recorded "
                     "(a file of NKI kernels is run as `python FILE` runs it: its __main__ must call them, "
                     "e.g. nki.simulate(kernel)(*arrays))")
    if detail == "instruction" and devices and not any(e.kernel for evs in devices.values() for e in evs):
        notes.append("instruction detail: the device ops carry no kernel timelines yet, so only op slices "
                     "are drawn for them")
    doc = summary_document(fields, chip=chip.name, detail=detail, ops=ops, fallback=fallback,
                           trace_stats=trace["otherData"]["neuronsim"],
                           kernels=[launch.name for launch in launches], notes=notes, breakdown=breakdown)
    return doc, trace


def _launches_on(chip, launches) -> tuple[list, list[str]]:
    """The launches simulated on the profile's chip, and a note about those on other chips: a
    script may simulate a kernel on several chips (``nki.simulate(k, chip=...)``); one profile is
    of one chip (``neuronsim profile --chip trn2,trn3`` profiles each)."""
    kept, other = [], {}
    for launch in launches:
        name = launch.placed[0].run.chip.name if launch.placed else chip.name
        if name == chip.name:
            kept.append(launch)
        else:
            other[name] = other.get(name, 0) + 1
    notes = [f"{n} nki.simulate launch{'es' if n > 1 else ''} on {name} left out: this profile is of "
             f"{chip.name} (profile both with --chip {chip.name},{name})"
             for name, n in sorted(other.items())]
    return kept, notes


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
