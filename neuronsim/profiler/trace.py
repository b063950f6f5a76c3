"""Chrome Trace Event Format (Perfetto, chrome://tracing) from kernel timelines and device op events.

Layout, after Neuron Explorer's device trace:

- one process per NeuronCore; its tracks are ``TensorE (LoadStationary)``, ``TensorMatrix
  (MultiplyMoving)``, ``VectorE``, ``ScalarE``, ``GpSimd``, ``Sync`` and one ``DMA q<N>`` per queue
  used (instruction detail), and ``Device ops`` / ``Host fallback`` / ``Host transfers`` /
  ``Collectives`` (one slice per op on the device clock);
- counters ``SBUF in use``, ``PSUM in use``, ``HBM in use`` (bytes), ``DMA throughput`` (GB/s) and
  ``Pending DMA count``;
- every instruction slice carries its opcode, operands, index and ``nki_source_location``.

A ``nc_matmul`` is drawn as two sub-slices, as Explorer draws it: ``LoadStationary`` on the TensorE
track, ``MultiplyMoving`` on the TensorMatrix track. The cost model charges
``max(min(MM_INIT, N_stationary), N_moving)`` (sim/engines/tensor.py): the two phases overlap, so
LoadStationary takes the first ``min(MM_INIT, N_stationary)/max(...)`` of the instruction and
MultiplyMoving the last ``N_moving/max(...)`` — each track stays in order, without overlaps.

Size is bounded: after ``max_instruction_events`` instruction slices a kernel is drawn aggregated
(a few slices per track, each standing for a run of consecutive instructions), after the aggregate
budget as its op slice only, and ops past ``max_op_events`` are aggregated the same way. The trace's
``otherData.neuronsim`` says what was aggregated; so does the summary.

Times: ``ts``/``dur`` in microseconds (the format's unit) rounded to the nanosecond;
``displayTimeUnit`` is ``ns``. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from neuronsim.profiler.events import (
    COLLECTIVE,
    FALLBACK,
    KERNEL,
    TRANSFER,
    DeviceOpEvent,
    KernelRun,
    PlacedRun,
)

DEFAULT_MAX_INSTRUCTION_EVENTS = 200_000
DEFAULT_MAX_OP_EVENTS = 200_000
AGGREGATE_SLICES_PER_TRACK = 16  # slices per track when a kernel is drawn aggregated
DMA_THROUGHPUT_BINS = 64  # counter samples per kernel
SCHEMA = "neuronsim-trace/1"

# Track (thread) ids inside a NeuronCore process, in display order.
TID_OPS, TID_FALLBACK, TID_TRANSFERS, TID_COLLECTIVES = 1, 2, 3, 4
TID_LOAD_STATIONARY, TID_MULTIPLY_MOVING = 10, 11
TID_ENGINE = {"vector": 12, "scalar": 13, "gpsimd": 14, "sync": 15}
TID_DMA0 = 100
LANE_TID_STEP = 1000  # overlapping bars of row ``tid`` go to rows tid + 1000, tid + 2000, ...
TRACK_NAMES = {
    TID_OPS: "Device ops", TID_FALLBACK: "Host fallback", TID_TRANSFERS: "Host transfers",
    TID_COLLECTIVES: "Collectives",
    TID_LOAD_STATIONARY: "TensorE (LoadStationary)", TID_MULTIPLY_MOVING: "TensorMatrix (MultiplyMoving)",
    TID_ENGINE["vector"]: "VectorE", TID_ENGINE["scalar"]: "ScalarE", TID_ENGINE["gpsimd"]: "GpSimd",
    TID_ENGINE["sync"]: "Sync",
}
_KIND_TID = {KERNEL: TID_OPS, FALLBACK: TID_FALLBACK, TRANSFER: TID_TRANSFERS, COLLECTIVE: TID_COLLECTIVES}


def us(ns: float) -> float:
    """Nanoseconds -> the format's microseconds, kept to the nanosecond."""
    return round(ns / 1000.0, 3)


def _dur(ts: float, end: float) -> float:
    """``end - ts`` such that ``ts + dur == end`` exactly in floats: back-to-back slices then meet
    exactly even at wall-clock magnitudes (~5e12 us, where a double resolves ~1 ns)."""
    if end <= ts:
        return 0.0
    tidy = round(end - ts, 3)
    return tidy if ts + tidy == end else end - ts


def dma_queue_name(queue: int) -> str:
    return f"DMA q{queue}"


@dataclass
class TraceStats:
    """What the trace holds and what it aggregated (written to ``otherData.neuronsim``)."""

    max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS
    max_op_events: int = DEFAULT_MAX_OP_EVENTS
    instruction_events: int = 0  # instruction slices drawn ...
    counter_events: int = 0  # ... and the counter samples of their kernels (both within the cap)
    aggregated_instructions: int = 0
    aggregated_kernels: int = 0
    undrawn_kernels: int = 0  # past the aggregate budget too: only their op slice is drawn
    op_events: int = 0
    aggregated_ops: int = 0

    @property
    def aggregated(self) -> bool:
        return bool(self.aggregated_instructions or self.undrawn_kernels or self.aggregated_ops)

    @property
    def aggregate_budget(self) -> int:
        return max(1000, self.max_instruction_events // 4)

    def as_dict(self) -> dict:
        return {
            "max_instruction_events": self.max_instruction_events, "max_op_events": self.max_op_events,
            "instruction_events": self.instruction_events, "counter_events": self.counter_events,
            "aggregated_instructions": self.aggregated_instructions,
            "aggregated_kernels": self.aggregated_kernels, "undrawn_kernels": self.undrawn_kernels,
            "op_events": self.op_events, "aggregated_ops": self.aggregated_ops, "aggregated": self.aggregated,
        }


@dataclass
class TraceBuilder:
    """Collects trace events and the metadata naming every process and track."""

    origin_ns: float = 0.0  # trace time 0, in the time base of the positions given to the builder
    stats: TraceStats = field(default_factory=TraceStats)
    events: list = field(default_factory=list)
    other_data: dict = field(default_factory=dict)
    _processes: dict = field(default_factory=dict)  # pid -> name
    _threads: dict = field(default_factory=dict)  # (pid, tid) -> name
    _aggregate_events: int = 0
    _arg_cache: dict = field(default_factory=dict)

    # ---- naming ------------------------------------------------------------------------------
    def process(self, pid: int, name: str, sort_index: int | None = None, labels: str | None = None) -> int:
        if pid not in self._processes:
            self._processes[pid] = name
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": name}})
            if sort_index is not None:
                self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                    "args": {"sort_index": sort_index}})
            if labels:
                self.events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                                    "args": {"labels": labels}})
        return pid

    def thread(self, pid: int, tid: int, name: str | None = None, sort_index: int | None = None) -> int:
        if (pid, tid) not in self._threads:
            name = name or TRACK_NAMES[tid]
            self._threads[(pid, tid)] = name
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": name}})
            self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                "args": {"sort_index": tid * 10 if sort_index is None else sort_index}})
        return tid

    # ---- events (positions in ns of the builder's time base) ----------------------------------
    def slice(self, pid: int, tid: int, name: str, start_ns: float, end_ns: float, cat: str,
              args: dict | None = None) -> dict:
        ts, end = us(start_ns - self.origin_ns), us(end_ns - self.origin_ns)
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": _dur(ts, end)}
        if args:
            event["args"] = args
        self.events.append(event)
        return event

    def counter(self, pid: int, name: str, at_ns: float, values: dict) -> None:
        self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": us(at_ns - self.origin_ns),
                            "args": values})

    def instant(self, pid: int, tid: int, name: str, at_ns: float, args: dict | None = None) -> None:
        event = {"ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid, "ts": us(at_ns - self.origin_ns)}
        if args:
            event["args"] = args
        self.events.append(event)

    def build(self, **other_data) -> dict:
        other = {**self.other_data, **other_data, "neuronsim": {"schema": SCHEMA, **self.stats.as_dict()}}
        return {"traceEvents": self.events, "displayTimeUnit": "ns", "otherData": other}


# ------------------------------------------------------------------------------ kernels

def _instruction_args(run: KernelRun) -> list[dict]:
    from neuronsim.sim.ir import DMA_OPS, Opcode

    program = run.program
    fallback_location = program.location or "<unknown>"
    tl = run.timeline
    rows = []
    for i, ins in enumerate(program.instructions):
        args = {
            "opcode": ins.opcode.name.lower(),
            "engine": ins.engine.name.lower(),
            "index": i,
            "operands": [ap.describe() for ap in (ins.dst, *ins.srcs, ins.dst2) if ap is not None],
            "nki_source_location": ins.location or fallback_location,
            "kernel": program.name,
        }
        if ins.name:
            args["name"] = ins.name
        if ins.opcode in DMA_OPS:
            from neuronsim.sim.engines.dma import transfer_bytes

            first, count = int(tl.dma_first_engine[i]), int(tl.dma_engine_count[i])
            args.update(queue=ins.queue, bytes=transfer_bytes(ins),
                        dma_engines=f"{first}..{first + count - 1}")
        elif ins.opcode is Opcode.NC_MATMUL:
            st, mv = ins.srcs
            args["flops"] = 2 * st.partitions * st.free_size * mv.free_size
        rows.append(args)
    return rows


def _track_of(track: int, pre_step: bool = False) -> int:
    """The trace row of a timeline track: TensorE's main steps (MultiplyMoving, transposes) on the
    TensorMatrix row, its LoadStationary steps on the TensorE row, as Explorer draws them."""
    from neuronsim.sim.schedule import DMA_TRACK0

    if track >= DMA_TRACK0:
        return TID_DMA0 + track - DMA_TRACK0
    if track == 0:
        return TID_LOAD_STATIONARY if pre_step else TID_MULTIPLY_MOVING
    return TID_ENGINE[("vector", "scalar", "gpsimd", "sync")[track - 1]]


def _name_tracks(b: TraceBuilder, pid: int, tracks: Iterable[int]) -> None:
    for tid in (TID_LOAD_STATIONARY, TID_MULTIPLY_MOVING, *TID_ENGINE.values()):
        b.thread(pid, tid)
    for tid in sorted(set(tracks)):
        if tid >= TID_DMA0:
            b.thread(pid, tid, dma_queue_name(tid - TID_DMA0))


def draw_kernel(b: TraceBuilder, run: KernelRun, pid: int, t0_ns: float) -> str:
    """Draw a kernel's instructions on its engine tracks from ``t0_ns``; returns how: ``instructions``,
    ``aggregated`` or ``none`` (over every budget)."""
    tl = run.timeline
    n = len(tl)
    stats = b.stats
    tids = [_track_of(int(t)) for t in tl.track]
    slices, counters = _kernel_cost(b, run)
    if stats.instruction_events + stats.counter_events + slices + counters <= stats.max_instruction_events:
        _draw_instructions(b, run, pid, t0_ns, tids)
        stats.instruction_events += slices
        stats.counter_events += counters
        return "instructions"
    per_track = len(set(tids)) * AGGREGATE_SLICES_PER_TRACK
    if b._aggregate_events + per_track <= stats.aggregate_budget:
        b._aggregate_events += _draw_aggregated(b, run, pid, t0_ns, tids)
        stats.aggregated_instructions += n
        stats.aggregated_kernels += 1
        return "aggregated"
    stats.undrawn_kernels += 1
    stats.aggregated_instructions += n
    return "none"


def _cached(b: TraceBuilder, run: KernelRun) -> tuple:
    key = id(run.program)
    cached = b._arg_cache.get(key)
    if cached is None or cached[0] is not run.program:
        cached = b._arg_cache[key] = (run.program, _instruction_args(run))
    return cached


def _kernel_cost(b: TraceBuilder, run: KernelRun) -> tuple[int, int]:
    """(instruction slices, counter samples) that drawing ``run`` in full adds."""
    from neuronsim.sim.ir import DMA_OPS, ON_CHIP

    _, rows = _cached(b, run)
    n_dma = sum(1 for i in run.program.instructions if i.opcode in DMA_OPS)
    on_chip = sum(1 for t in run.program.tensors if t.memory in ON_CHIP)
    counters = 4 + 2 * on_chip + 2 + (2 * n_dma + DMA_THROUGHPUT_BINS + 1 if n_dma else 0)
    return len(rows) + int((run.timeline.pre_track >= 0).sum()), counters


def _draw_instructions(b: TraceBuilder, run: KernelRun, pid: int, t0_ns: float, tids: Sequence[int]) -> None:
    from neuronsim.sim.ir import Opcode
    from neuronsim.sim.schedule import PRE_EVENT_NAMES

    _, rows = _cached(b, run)
    _name_tracks(b, pid, tids)
    tl = run.timeline
    instructions = run.program.instructions
    # (tid, name, start, end, row): a bar spans issue to results landed, as Explorer's
    bars = [(tid, "MultiplyMoving" if instructions[i].opcode is Opcode.NC_MATMUL else rows[i]["opcode"],
             float(tl.start_ns[i]) + t0_ns, float(tl.done_ns[i]) + t0_ns, rows[i])
            for i, tid in enumerate(tids)]
    for i in np.flatnonzero(tl.pre_track >= 0).tolist():
        track = int(tl.pre_track[i])
        name = "LoadStationary" if track == 0 else PRE_EVENT_NAMES[instructions[i].opcode].lower()
        bars.append((_track_of(track, pre_step=True), name, float(tl.pre_start_ns[i]) + t0_ns,
                     float(tl.pre_done_ns[i]) + t0_ns, rows[i]))
    for tid, name, s, e, args in _in_lanes(b, pid, bars):
        b.slice(pid, tid, name, s, e, args["engine"], args)
    _draw_counters(b, run, pid, t0_ns)


def _in_lanes(b: TraceBuilder, pid: int, bars: list) -> list:
    """Pipelined instructions overlap on their engine; a trace row must not. Bars that overlap an
    earlier one on the same row go to the row's next lane (a row of its own just below it), as
    Neuron Explorer stacks them."""
    bars.sort(key=lambda bar: (bar[0], bar[2]))
    out, lane_end, row = [], [], None
    for tid, name, s, e, args in bars:
        if tid != row:
            row, lane_end = tid, []
        lane = next((k for k, end in enumerate(lane_end) if end <= s), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(e)
        lane_end[lane] = e
        lane_tid = tid if lane == 0 else tid + LANE_TID_STEP * lane
        if lane:
            b.thread(pid, lane_tid, f"{b._threads[(pid, tid)]} ({lane + 1})", sort_index=tid * 10 + lane)
        out.append((lane_tid, name, s, e, args))
    return out


def _draw_aggregated(b: TraceBuilder, run: KernelRun, pid: int, t0_ns: float, tids: Sequence[int]) -> int:
    tl = run.timeline
    tid_arr = np.asarray(tids)
    _name_tracks(b, pid, tids)
    bars = []
    for tid in sorted(set(tids)):
        idx = np.flatnonzero(tid_arr == tid)
        for chunk in np.array_split(idx, min(AGGREGATE_SLICES_PER_TRACK, idx.size)):
            s, e = float(tl.start_ns[chunk].min()) + t0_ns, float(tl.done_ns[chunk].max()) + t0_ns
            busy = float((tl.done_ns[chunk] - tl.start_ns[chunk]).sum())
            bars.append((tid, f"{chunk.size} instructions (aggregated)", s, e,
                         {"aggregated_instructions": int(chunk.size), "busy_ns": round(busy, 3),
                          "kernel": run.program.name, "engine": "aggregated"}))
    for tid, name, s, e, args in _in_lanes(b, pid, bars):
        b.slice(pid, tid, name, s, e, "aggregated", {k: v for k, v in args.items() if k != "engine"})
    return len(bars)


def _step_counter(b: TraceBuilder, pid: int, name: str, series: str, t0_ns: float,
                  changes: list[tuple[float, float]]) -> None:
    """Emit a step function from (time, delta) changes, one sample per distinct time."""
    changes.sort(key=lambda c: c[0])
    level, i = 0.0, 0
    while i < len(changes):
        t = changes[i][0]
        while i < len(changes) and changes[i][0] == t:
            level += changes[i][1]
            i += 1
        b.counter(pid, name, t0_ns + t, {series: round(level, 6)})


def _draw_counters(b: TraceBuilder, run: KernelRun, pid: int, t0_ns: float) -> None:
    from neuronsim.sim.engines.dma import transfer_bytes
    from neuronsim.sim.ir import DMA_OPS, Memory

    program, tl = run.program, run.timeline
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    dma = []
    for i, ins in enumerate(program.instructions):
        s, e = float(tl.start_ns[i]), float(tl.done_ns[i])
        for ap, _ in ins.accesses():
            t = ap.tensor.id
            first[t] = min(first.get(t, s), s)
            last[t] = max(last.get(t, e), e)
        if ins.opcode in DMA_OPS:
            from_hbm, to_hbm = ins.srcs[0].memory is Memory.HBM, ins.dst.memory is Memory.HBM
            dma.append((s, e, transfer_bytes(ins), from_hbm, to_hbm, float(tl.issue_ns[i])))
    total = tl.total_ns
    for memory, label in ((Memory.SBUF, "SBUF in use"), (Memory.PSUM, "PSUM in use")):
        changes = [(0.0, 0.0), (total, 0.0)]
        for t in program.tensors:
            if t.memory is memory and t.id in first:
                nbytes = t.partitions * t.bytes_per_partition
                changes += [(first[t.id], nbytes), (last[t.id], -nbytes)]
        _step_counter(b, pid, label, "bytes", t0_ns, changes)
    hbm = sum(t.nbytes for t in program.tensors if t.memory is Memory.HBM)
    _step_counter(b, pid, "HBM in use", "bytes", t0_ns, [(0.0, hbm), (total, -hbm)])
    if dma:
        _step_counter(b, pid, "Pending DMA count", "transfers", t0_ns,  # triggered, not yet done
                      [(d[5], 1) for d in dma] + [(d[1], -1) for d in dma])
        _dma_throughput(b, pid, t0_ns, total, dma)


def _dma_throughput(b: TraceBuilder, pid: int, t0_ns: float, total_ns: float, dma: list) -> None:
    """Bytes per bin, each transfer spread evenly over its interval, as GB/s (= bytes per ns)."""
    bins = DMA_THROUGHPUT_BINS
    width = total_ns / bins if total_ns > 0 else 1.0
    edges = np.arange(bins + 1) * width
    series = {"total": np.zeros(bins), "hbm_read": np.zeros(bins), "hbm_write": np.zeros(bins)}
    for s, e, nbytes, from_hbm, to_hbm, _issued in dma:
        overlap = np.clip(np.minimum(edges[1:], e) - np.maximum(edges[:-1], s), 0.0, None)
        share = overlap / (e - s) * nbytes if e > s else np.zeros(bins)
        series["total"] += share
        if from_hbm:
            series["hbm_read"] += share
        if to_hbm:
            series["hbm_write"] += share
    for k in range(bins):
        b.counter(pid, "DMA throughput (GB/s)", t0_ns + edges[k],
                  {name: round(float(v[k] / width), 6) for name, v in series.items()})
    b.counter(pid, "DMA throughput (GB/s)", t0_ns + total_ns, {name: 0.0 for name in series})


def core_process_name(device: int, chip_name: str, what: str = "simulated") -> str:
    return f"neuron:{device} NeuronCore ({chip_name}, {what})"


def kernel_trace(run: KernelRun, *, max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS) -> dict:
    """The trace of one kernel run, time 0 at the kernel's start."""
    return launch_trace([PlacedRun(run)], max_instruction_events=max_instruction_events)


def launch_trace(placed: Sequence[PlacedRun], *, name: str | None = None,
                 max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS) -> dict:
    """The trace of one launch (``nki.simulate``): each physical core a process, each run drawn
    at its offset on its core."""
    placed = list(placed)
    if not placed:
        raise ValueError("launch_trace needs at least one kernel run")
    chip = placed[0].run.chip
    name = name or placed[0].run.program.name
    b = TraceBuilder(stats=TraceStats(max_instruction_events=max_instruction_events))
    capped = False
    for p in sorted(placed, key=lambda p: (p.core, p.offset_ns)):
        pid = p.core + 1
        b.process(pid, core_process_name(p.core, chip.name, f"kernel {name}"), sort_index=p.core)
        b.thread(pid, TID_OPS, "Kernel")
        program = p.run.program
        b.slice(pid, TID_OPS, program.name, p.offset_ns, p.end_ns, "kernel",
                {"instructions": len(p.run.timeline), "core": p.core,
                 "nki_source_location": program.location or "<unknown>"})
        how = draw_kernel(b, p.run, pid, p.offset_ns)
        if how != "instructions" and not capped:
            capped = True
            b.instant(pid, TID_OPS, "trace capped: instructions aggregated", p.offset_ns)
    return b.build(kernel=name, chip=chip.name, cores=len({p.core for p in placed}))


# ------------------------------------------------------------------------------ device ops

def place_events(events: Sequence[DeviceOpEvent], base_time_ns: int | float = 0, origin_ns: int = 0
                 ) -> list[float]:
    """Where each op starts, in ns after ``origin_ns`` (the trace's time 0).

    An op issued at a known host time (``wall_ns``) starts then, or when the device finishes the
    previous op if later — a device running the host's stream of work. An op without ``wall_ns``
    sits at ``base_time_ns + start_ns`` (its simulated time from the clock's start), or after the
    previous op. With ``base_time_ns = 0`` and no wall times this is the simulated timeline itself.
    Wall times are ~1.8e18 ns: the origin is subtracted in integers before going to floats.
    """
    placed = []
    free = -math.inf
    base = base_time_ns - origin_ns
    for e in events:
        anchor = float(e.wall_ns - origin_ns) if e.wall_ns is not None else base + e.start_ns
        start = max(anchor, free)
        placed.append(start)
        free = start + e.duration_ns
    return placed


def _op_args(e: DeviceOpEvent, device: int, hta: bool) -> dict:
    args = {"kind": e.kind, "native": e.native, "simulated_start_ns": round(e.start_ns, 3),
            "duration_ns": round(e.duration_ns, 3)}
    if e.bytes:
        args["bytes"] = int(e.bytes)
    if e.launch_ns:
        args["launch_ns"] = round(e.launch_ns, 3)
    if e.kernel is not None:
        args["kernel"] = e.kernel.program.name
    if hta:  # what Holistic Trace Analysis reads as a device kernel on a stream
        args["device"] = device
        args["stream"] = _KIND_TID[e.kind]
    return args


def _op_name(e: DeviceOpEvent) -> str:
    if e.kind == TRANSFER:  # HTA counts Memcpy* as memory kernels
        direction = "DtoH" if e.direction == "d2h" else "HtoD"
        return f"Memcpy {direction} ({e.name})"
    if e.kind == FALLBACK:
        return f"{e.name} (host fallback)"
    return e.name


def draw_device(b: TraceBuilder, events: Sequence[DeviceOpEvent], *, chip_name: str, device: int = 0,
                pid: int | None = None, detail: str = "op", base_time_ns: int | float = 0,
                origin_ns: int = 0, hta: bool = False) -> int:
    """Draw one device clock's ops (and, with ``detail="instruction"``, their kernels' engine
    tracks) into ``b``; returns the pid used."""
    if detail not in ("op", "instruction"):
        raise ValueError(f"detail must be 'op' or 'instruction', got {detail!r}")
    pid = device if pid is None else pid
    b.process(pid, core_process_name(device, chip_name), sort_index=-100 + device, labels="neuron")
    starts = place_events(events, base_time_ns, origin_ns)
    limit = b.stats.max_op_events
    for tid in sorted({_KIND_TID[e.kind] for e in events}):
        b.thread(pid, tid)
    for i, e in enumerate(events[:limit]):
        tid = _KIND_TID[e.kind]
        b.slice(pid, tid, _op_name(e), starts[i], starts[i] + e.duration_ns, "kernel" if hta else e.kind,
                _op_args(e, device, hta))
        if detail == "instruction" and e.kind == KERNEL and e.kernel is not None:
            draw_kernel(b, e.kernel, pid, starts[i] + e.launch_ns)
    b.stats.op_events += min(limit, len(events))
    rest = events[limit:]
    if rest:
        _aggregate_ops(b, pid, rest, starts[limit:], device, hta)
        b.instant(pid, _KIND_TID[rest[0].kind], "trace capped: ops aggregated", starts[limit],
                  {"aggregated_ops": len(rest)})
    return pid


def _aggregate_ops(b: TraceBuilder, pid: int, events: Sequence[DeviceOpEvent], starts: Sequence[float],
                   device: int, hta: bool) -> None:
    by_track: dict[int, list[int]] = {}
    for i, e in enumerate(events):
        by_track.setdefault(_KIND_TID[e.kind], []).append(i)
    per_track = max(1, b.stats.max_op_events // 10)
    for tid, idx in by_track.items():
        for chunk in np.array_split(np.asarray(idx), min(per_track, len(idx))):
            first, last = int(chunk[0]), int(chunk[-1])
            busy = sum(events[j].duration_ns for j in chunk)
            args = {"aggregated_ops": int(chunk.size), "busy_ns": round(busy, 3)}
            if hta:
                args.update(device=device, stream=tid)
            b.slice(pid, tid, f"{chunk.size} ops (aggregated)", starts[first],
                    starts[last] + events[last].duration_ns, "kernel" if hta else "aggregated", args)
    b.stats.aggregated_ops += len(events)


def device_trace(events: Sequence[DeviceOpEvent], *, chip_name: str, detail: str = "op", device: int = 0,
                 max_instruction_events: int = DEFAULT_MAX_INSTRUCTION_EVENTS,
                 max_op_events: int = DEFAULT_MAX_OP_EVENTS) -> dict:
    """The trace of one device clock's ops on the simulated timeline (time 0 = the clock's start).

    Host issue times (``wall_ns``) are left out: they place ops in a host trace, not here."""
    b = TraceBuilder(stats=TraceStats(max_instruction_events, max_op_events))
    simulated = [replace(e, wall_ns=None) if e.wall_ns is not None else e for e in events]
    draw_device(b, simulated, chip_name=chip_name, device=device, detail=detail)
    return b.build(chip=chip_name, detail=detail)


# ------------------------------------------------------------------------------ files

def write_trace(trace: dict, path: str | os.PathLike) -> None:
    text = json.dumps(trace, separators=(",", ":"))  # one write: json.dump's many small writes are slow
    with open(path, "w") as f:
        f.write(text)


def load_trace(path: str | os.PathLike) -> dict:
    with open(path) as f:
        return json.load(f)
