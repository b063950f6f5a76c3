"""Timing: dependencies from memory-region overlaps, in-order engines, documented costs.

``schedule_program`` turns a validated Program into a :class:`Timeline`. Data-independent, so it
is computed once per Program and cached.

Compute engines (TensorE, VectorE, ScalarE, GpSimd) issue their streams in order. An instruction
starts when its engine has issued the previous one and every earlier instruction it conflicts
with (RAW, WAR, WAW on overlapping memory: the semaphores the compiler inserts) is done. Its cost
(the engine module's documented formula) is its issue interval: the engine issues the next
instruction ``cost`` later (``end_ns``), and the results land ``<engine>_engine_pipeline_latency_cycles``
after that (``done_ns``), which is what dependents wait for and what a profile's instruction bar
spans. Back to back, instructions overlap in the pipeline, as Neuron Explorer draws them.

Some instructions run a step of their own first (``pre_*``), drawn as a separate event:

- ``nc_matmul``: LoadStationary on TensorE's weight-load path, then MultiplyMoving. LS waits only
  for the stationary operand, runs in the background of the previous MM (once that MM has started,
  its weights are in use and the next ones can load), and MM starts when LS has issued.
- ``activation`` whose function is not in ScalarE's loaded table set: the table load, on ScalarE,
  once the activation's inputs are ready (as Explorer shows ``ACT_TABLE_LOAD``).
- a DMA with on-device descriptor generation: the trigger, on the engine that issues it.

TensorE throttling (S26): a burst starts at ``tensor_throttle_start_fraction`` of full rate and
ramps to full over ``tensor_throttle_ramp_ns``; the limit re-engages — a new burst starts — when
TensorE's utilization over the last ``tensor_throttle_window_ns`` (or since the burst started) is
below ``tensor_throttle_utilization_threshold``.

DMA (``sim/engines/dma.py`` has the model and its sources): each DMA queue is a stream of its own
that triggers in order, at most one transfer per ``dma_queue_issue_interval_ns``; after the trigger
latency each engine in use takes the earliest window in which it is free for its piece — a queued
transfer does not hold the engines, so transfers on other queues run meanwhile — in order with the
same queue's earlier pieces on that engine. ``start_ns``/``end_ns`` span the pieces.

An indirect DMA's indexed side (``engines/dma_indirect.py``) counts as its whole tensor.
Regions are bounding boxes — (memory space, partitions [p0, p1), bytes [b0, b1)) — in physical
SBUF/PSUM coordinates, so two tensors sharing bytes (rotating buffers) depend on each other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from neuronsim.sim import tiers
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.dma import kick_timing, piece_ns, transfer_engines, trigger
from neuronsim.sim.engines.dma_indirect import indexed_side
from neuronsim.sim.engines.scalar import activation_table
from neuronsim.sim.engines.tensor import load_stationary_cycles
from neuronsim.sim.ir import COMPUTE_ENGINES, INDIRECT_OPS, AccessPattern, Engine, Memory, Opcode, Program
from neuronsim.sim.memory.layout import Placement

N_COMPUTE_TRACKS = 5  # tensor, vector, scalar, gpsimd, sync; DMA queue q is track 5 + q
DMA_TRACK0 = 5

# What runs before an instruction's main step (``pre_kind``): nothing, TensorE's LoadStationary
# (its own path, in the background), or a step on ``pre_track``'s stream (table load, DMA trigger).
PRE_NONE, PRE_LOAD_STATIONARY, PRE_ON_TRACK = 0, 1, 2
PRE_EVENT_NAMES = {Opcode.NC_MATMUL: "LOAD_STATIONARY", Opcode.ACTIVATION: "ACT_TABLE_LOAD",
                   Opcode.DMA_COPY: "DMA_TRIGGER", Opcode.DMA_TRANSPOSE: "DMA_TRIGGER",
                   Opcode.DMA_COPY_INDIRECT: "DMA_TRIGGER", Opcode.DMA_COMPUTE: "DMA_TRIGGER"}

# Timing parameters passed to the Numba scheduler, by position.
_P_THROTTLE_START, _P_RAMP, _P_WINDOW, _P_THRESHOLD, _P_QUEUE_INTERVAL, _P_ENGINES = range(6)


def track_name(track: int) -> str:
    if track < DMA_TRACK0:
        return Engine(track).name.lower()
    return f"dma_q{track - DMA_TRACK0}"


@dataclass(frozen=True)
class Timeline:
    """When each instruction ran. Times in nanoseconds from the Program's start.

    ``start_ns``: the main step starts (a DMA: its first piece); ``end_ns``: the engine may issue
    its next instruction (start + the documented cost; a DMA: its last piece ends); ``done_ns``:
    the results have landed (``end_ns`` + pipeline latency; a DMA: ``end_ns``). ``issue_ns``: the
    stream issued it (a DMA: its trigger). ``pre_*``: the step run before the main one (see the
    module docstring), NaN / -1 where there is none.
    """

    track: np.ndarray  # int64 per instruction: engine (0..4) or DMA_TRACK0 + queue
    start_ns: np.ndarray
    end_ns: np.ndarray
    done_ns: np.ndarray
    issue_ns: np.ndarray
    pre_track: np.ndarray  # -1: no step before the main one
    pre_start_ns: np.ndarray
    pre_done_ns: np.ndarray
    dma_first_engine: np.ndarray  # -1 for non-DMA instructions
    dma_engine_count: np.ndarray
    dma_piece_ns: np.ndarray  # each engine's busy time for the transfer (0 for non-DMA)
    n_dma_engines: int
    engine_busy_ns: dict[str, float] = field(default_factory=dict)  # per track: time with a span running

    @property
    def total_ns(self) -> float:
        if not self.done_ns.size:
            return 0.0
        return float(max(self.done_ns.max(), np.nanmax(self.pre_done_ns, initial=0.0)))

    def events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every span a profile draws: (instruction index, track, is_pre_step, start, end), main
        steps (start to done) first, then the steps before them."""
        n = self.track.size
        pre = np.flatnonzero(self.pre_track >= 0)
        index = np.concatenate([np.arange(n), pre])
        track = np.concatenate([self.track, self.pre_track[pre]])
        is_pre = np.concatenate([np.zeros(n, bool), np.ones(pre.size, bool)])
        start = np.concatenate([self.start_ns, self.pre_start_ns[pre]])
        end = np.concatenate([self.done_ns, self.pre_done_ns[pre]])
        return index, track, is_pre, start, end

    def __len__(self) -> int:
        return int(self.track.size)


def _region(ap: AccessPattern, placement: Placement, chip: ChipSpec) -> tuple[int, int, int, int, int]:
    """(space, p0, p1, b0, b1): SBUF = 0, PSUM = 1, HBM tensor t = 2 + t."""
    t = ap.tensor
    item = t.dtype.itemsize
    lo = hi = 0
    for step, num in ap.free_dims:
        lo += min(0, step * (num - 1))
        hi += max(0, step * (num - 1))
    if t.memory is Memory.HBM:
        p_reach = ap.pattern[0][0] * (ap.partitions - 1)
        first = ap.offset + min(0, p_reach) + lo
        last = ap.offset + max(0, p_reach) + hi
        space = 2 + (t.id if t.alias_of is None else t.alias_of)  # an alias shares its tensor's bytes
        return space, 0, 1, first * item, (last + 1) * item
    row0, col0 = divmod(ap.offset, t.free_size)
    p0 = placement.start_partition[t.id] + row0
    b0 = placement.byte_offset[t.id] + (col0 + lo) * item
    b1 = placement.byte_offset[t.id] + (col0 + hi + 1) * item
    return (0 if t.memory is Memory.SBUF else 1), p0, p0 + ap.partitions, b0, b1


@dataclass(frozen=True)
class ScheduleInputs:
    """Everything the Numba scheduler needs, as arrays (data-independent)."""

    track: np.ndarray
    cycles: np.ndarray  # main step's issue interval in engine cycles (compute) ...
    piece_ns: np.ndarray  # ... or each DMA engine's busy time (DMA)
    latency_ns: np.ndarray  # main step: issue interval end -> results landed
    pre_kind: np.ndarray  # PRE_*
    pre_track: np.ndarray
    pre_ns: np.ndarray  # the step before: issue interval (LS) or duration
    pre_latency_ns: np.ndarray
    dma_first: np.ndarray
    dma_count: np.ndarray
    kick_ns: np.ndarray  # DMA: trigger -> first engine start
    stagger_ns: np.ndarray  # DMA: between engine starts
    acc_ptr: np.ndarray  # accesses of instruction i are acc[acc_ptr[i]:acc_ptr[i+1]]
    acc: np.ndarray  # [n_acc, 7]: space, p0, p1, b0, b1, is_write, read by the step before
    clock_ghz: np.ndarray  # per compute track
    params: np.ndarray  # float64 timing parameters (_P_*)
    # The last BRANCH before instruction i (-1: none): i waits for its decision. None: no branches.
    after_branch: np.ndarray | None = None


def _compute_step(ins, chip: ChipSpec, table_loaded: list) -> tuple[float, float, int, int, float, float]:
    """(cycles, latency ns, pre kind, pre track, pre ns, pre latency ns) of a compute instruction."""
    engine = ins.engine
    clock_ghz = chip.clock_hz(engine.clock_name) / 1e9
    latency = chip.pipeline_latency_cycles(engine.clock_name) / clock_ghz
    cycles = OPDEFS[ins.opcode].cycles(ins, chip)
    if ins.opcode is Opcode.NC_MATMUL:
        load_ns = load_stationary_cycles(ins, chip) / clock_ghz
        return cycles, latency, PRE_LOAD_STATIONARY, int(engine), load_ns, latency
    if engine is Engine.SCALAR:
        table = activation_table(ins, chip)
        if table is not None and table != table_loaded[0]:
            table_loaded[0] = table
            return cycles, latency, PRE_ON_TRACK, int(engine), chip.act_table_load_ns, 0.0
    return cycles, latency, PRE_NONE, -1, 0.0, 0.0


def schedule_inputs(program: Program, chip: ChipSpec, placement: Placement) -> ScheduleInputs:
    n = len(program.instructions)
    track = np.empty(n, np.int64)
    cycles, pieces, latency_ns = np.zeros(n), np.zeros(n), np.zeros(n)
    pre_kind, pre_track = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    pre_ns, pre_latency_ns = np.zeros(n), np.zeros(n)
    dma_first, dma_count = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    kick_ns, stagger_ns = np.zeros(n), np.zeros(n)
    acc_ptr = np.zeros(n + 1, np.int64)
    acc: list[tuple[int, ...]] = []
    table_loaded: list = [None]  # ScalarE's activation-table set, in program order
    after_branch = np.full(n, -1, np.int64)
    branch = -1
    for i, ins in enumerate(program.instructions):
        after_branch[i] = branch
        if ins.opcode is Opcode.BRANCH:
            branch = i
        if ins.engine is Engine.DMA:
            track[i] = DMA_TRACK0 + ins.queue
            sbuf_side = ins.dst if ins.dst.memory is not Memory.HBM else ins.srcs[0]
            start = _region(sbuf_side, placement, chip)[1] if sbuf_side.memory is not Memory.HBM else 0
            first, count = transfer_engines(ins, chip, start)
            dma_first[i], dma_count[i] = first, count
            pieces[i] = piece_ns(ins, chip, count)
            kick_ns[i], stagger_ns[i] = kick_timing(ins, chip)
            engine, issue = trigger(ins, chip)
            if engine is not None:
                pre_kind[i], pre_track[i], pre_ns[i] = PRE_ON_TRACK, int(engine), issue
        else:
            track[i] = int(ins.engine)
            (cycles[i], latency_ns[i], pre_kind[i], pre_track[i], pre_ns[i],
             pre_latency_ns[i]) = _compute_step(ins, chip, table_loaded)
        stationary = ins.srcs[0] if ins.opcode is Opcode.NC_MATMUL else None
        indirect = indexed_side(ins) if ins.opcode in INDIRECT_OPS else None
        for ap, is_write in ins.accesses():
            if ap is indirect:  # its bytes are known only at run time: all of its tensor
                ap = ap.tensor.ap()
            acc.append((*_region(ap, placement, chip), int(is_write), int(ap is stationary)))
        acc_ptr[i + 1] = len(acc)
    clock = np.zeros(N_COMPUTE_TRACKS, np.float64)
    for e in (*COMPUTE_ENGINES, Engine.SYNC):
        clock[int(e)] = chip.clock_hz(e.clock_name) / 1e9
    acc_arr = np.array(acc, dtype=np.int64).reshape(len(acc), 7)
    params = np.array([chip.tensor_throttle_start_fraction, chip.tensor_throttle_ramp_ns,
                       chip.tensor_throttle_window_ns, chip.tensor_throttle_utilization_threshold,
                       chip.dma_queue_issue_interval_ns, chip.dma_engines], np.float64)
    return ScheduleInputs(track, cycles, pieces, latency_ns, pre_kind, pre_track, pre_ns, pre_latency_ns,
                          dma_first, dma_count, kick_ns, stagger_ns, acc_ptr, acc_arr, clock, params,
                          after_branch)


def run_schedule(inp: ScheduleInputs, n_tracks: int, n_spaces: int, tiered: bool = False):
    """(start, end, done, issue, pre_start, pre_done) arrays for ``inp``. ``tiered``: the scheduler's
    Python source runs until its machine code is ready (``tiers.py``; the same float64 operations
    in the same order, so the same times)."""
    after_branch = np.full(inp.track.size, -1, np.int64) if inp.after_branch is None else inp.after_branch
    args = (inp.track, inp.cycles, inp.piece_ns, inp.latency_ns, inp.pre_kind, inp.pre_track, inp.pre_ns,
            inp.pre_latency_ns, inp.dma_first, inp.dma_count, inp.kick_ns, inp.stagger_ns, inp.acc_ptr,
            inp.acc, inp.clock_ghz, inp.params, after_branch, n_tracks, n_spaces)
    if not tiered or schedule_arrays.overloads:
        return schedule_arrays(*args)
    sig = tuple(schedule_arrays.typeof_pyval(a) for a in args)
    if tiers.available("scheduler", lambda: tiers.load_cached(schedule_arrays, sig),
                       lambda: schedule_arrays.compile(sig)):
        return schedule_arrays(*args)
    began = time.thread_time()
    result = tiers.interpreted(schedule_arrays)(*args)
    tiers.ran_interpreted("scheduler", time.thread_time() - began)
    return result


def schedule_program(program: Program, chip: ChipSpec, placement: Placement,
                     tiered: bool = False) -> Timeline:
    inp = schedule_inputs(program, chip, placement)
    n_tracks = DMA_TRACK0 + chip.dma_queues_per_engine
    start, end, done, issue, pre_start, pre_done = run_schedule(inp, n_tracks, 2 + len(program.tensors),
                                                                tiered)
    timeline = Timeline(inp.track, start, end, done, issue, inp.pre_track, pre_start, pre_done, inp.dma_first,
                        inp.dma_count, np.where(inp.dma_first >= 0, inp.piece_ns, 0.0), chip.dma_engines)
    _, track, _, s, e = timeline.events()
    for t in np.unique(track):
        timeline.engine_busy_ns[track_name(int(t))] = union_length(s[track == t], e[track == t])
    return timeline


def union_length(start_ns: np.ndarray, end_ns: np.ndarray) -> float:
    """Length of the union of intervals ``[start, end)``: the time at least one of them is running."""
    if start_ns.size == 0:
        return 0.0
    order = np.argsort(start_ns, kind="stable")
    s = start_ns[order]
    reach = np.maximum.accumulate(end_ns[order])
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return float((reach[last] - s[first]).sum())


@njit(cache=True)
def schedule_arrays(track, cycles, piece_ns, latency_ns, pre_kind, pre_track, pre_ns, pre_latency_ns,
                    dma_first, dma_count, kick_ns, stagger_ns, acc_ptr, acc, clock_ghz, params, after_branch,
                    n_tracks, n_spaces):
    n = track.size
    start = np.zeros(n, np.float64)
    end = np.zeros(n, np.float64)
    done = np.zeros(n, np.float64)
    issue = np.zeros(n, np.float64)
    pre_start = np.full(n, np.nan)
    pre_done = np.full(n, np.nan)
    track_free = np.zeros(n_tracks, np.float64)  # when each stream can issue its next instruction
    n_engines = int(params[_P_ENGINES])
    # DMA engines: busy intervals per engine (disjoint, sorted, merged when they touch), and the
    # end of each queue's last piece per engine (a queue's pieces run in order on an engine).
    n_dma = 0
    for i in range(n):
        if dma_first[i] >= 0:
            n_dma += 1
    busy_s = np.empty((n_engines, n_dma + 1), np.float64)
    busy_e = np.empty((n_engines, n_dma + 1), np.float64)
    busy_n = np.zeros(n_engines, np.int64)
    queue_piece_end = np.zeros((n_tracks, n_engines), np.float64)
    queue_last_trigger = np.full(n_tracks, -1.0e30)
    # TensorE: its weight-load path, and the MultiplyMoving steps for the throttle window.
    ls_free = 0.0
    last_mm_start = 0.0
    mm_s = np.empty(n + 1, np.float64)
    mm_e = np.empty(n + 1, np.float64)
    n_mm = 0
    burst_start = -1.0e30
    # Live access records, one singly linked list per memory space.
    n_acc = acc.shape[0]
    rec_next = np.full(n_acc, -1, np.int64)
    rec_end = np.zeros(n_acc, np.float64)
    rec_track = np.zeros(n_acc, np.int64)
    head = np.full(n_spaces, -1, np.int64)
    for i in range(n):
        tr = track[i]
        ready_all, ready_pre = _dependencies(acc, acc_ptr, i, tr, head, rec_next, rec_end, rec_track)
        if after_branch[i] >= 0:  # control dependency: the branch has decided this instruction runs
            ready_all = max(ready_all, done[after_branch[i]])
            ready_pre = max(ready_pre, done[after_branch[i]])
        if dma_first[i] >= 0:
            t = ready_all
            if pre_kind[i] == PRE_ON_TRACK:  # the trigger runs on its engine's stream
                pt = pre_track[i]
                pre_start[i] = max(t, track_free[pt])
                pre_done[i] = pre_start[i] + pre_ns[i]
                track_free[pt] = pre_done[i]
                issue[i] = pre_start[i]
                t = pre_done[i]
            t = max(t, queue_last_trigger[tr] + params[_P_QUEUE_INTERVAL])  # the queue triggers in order
            if pre_kind[i] != PRE_ON_TRACK:
                issue[i] = t
            queue_last_trigger[tr] = t
            first_slot = n_engines - dma_count[i]  # engines with data start last
            s_min, e_max = 1.0e300, 0.0
            for j in range(dma_count[i]):
                e = dma_first[i] + j
                kick = t + kick_ns[i] + (first_slot + j) * stagger_ns[i]
                s = _dma_window(busy_s, busy_e, busy_n, e, max(kick, queue_piece_end[tr, e]), piece_ns[i])
                _dma_occupy(busy_s, busy_e, busy_n, e, s, s + piece_ns[i])
                queue_piece_end[tr, e] = s + piece_ns[i]
                s_min = min(s_min, s)
                e_max = max(e_max, s + piece_ns[i])
            start[i], end[i], done[i] = s_min, e_max, e_max
        else:
            ready = ready_all
            if pre_kind[i] == PRE_LOAD_STATIONARY:
                pre_start[i] = max(ready_pre, ls_free, last_mm_start)
                ls_free = pre_start[i] + pre_ns[i]
                pre_done[i] = ls_free + pre_latency_ns[i]
                ready = max(ready, ls_free)
            elif pre_kind[i] == PRE_ON_TRACK:
                pre_start[i] = max(ready, track_free[pre_track[i]])
                pre_done[i] = pre_start[i] + pre_ns[i]
                track_free[pre_track[i]] = pre_done[i]
                ready = pre_done[i]
            s = max(ready, track_free[tr])
            duration = cycles[i] / clock_ghz[tr]
            if tr == 0:  # TensorE dI/dt throttle (S26)
                window = min(params[_P_WINDOW], s - burst_start)
                used = _busy_since(mm_s, mm_e, n_mm, s - window, s) if window > 0.0 else 0.0
                if used < params[_P_THRESHOLD] * window or window <= 0.0:
                    burst_start = s
                ramp = (s - burst_start) / params[_P_RAMP]
                fraction = params[_P_THROTTLE_START] + (1.0 - params[_P_THROTTLE_START]) * min(1.0, ramp)
                duration = duration / fraction
                mm_s[n_mm] = s
                mm_e[n_mm] = s + duration
                n_mm += 1
                last_mm_start = s
            start[i] = s
            end[i] = s + duration
            done[i] = end[i] + latency_ns[i]
            issue[i] = pre_start[i] if pre_kind[i] != PRE_NONE else s
            track_free[tr] = end[i]
        _record(acc, acc_ptr, i, tr, done[i], head, rec_next, rec_end, rec_track)
    return start, end, done, issue, pre_start, pre_done


@njit(cache=True)
def _dependencies(acc, acc_ptr, i, tr, head, rec_next, rec_end, rec_track):
    """(ready, ready for the step before): when every earlier overlapping access where either side
    writes is done — for all accesses, and for those the step before reads.

    On one compute engine, issue order already orders writes after earlier reads and writes; only a
    read of an earlier result waits for it to land (S20: dependent back-to-back ScalarE instructions
    pay their latency) — except on TensorE, whose matmuls accumulate into PSUM in pipeline order."""
    ready = 0.0
    ready_pre = 0.0
    for k in range(acc_ptr[i], acc_ptr[i + 1]):
        r = head[acc[k, 0]]
        while r != -1:
            same_engine = rec_track[r] == tr and tr < DMA_TRACK0
            ordered = same_engine and (tr == 0 or acc[k, 5] == 1 or acc[r, 5] == 0)
            if (acc[k, 5] == 1 or acc[r, 5] == 1) and not ordered and _overlap(acc, k, r):
                if rec_end[r] > ready:
                    ready = rec_end[r]
                if acc[k, 6] == 1 and rec_end[r] > ready_pre:
                    ready_pre = rec_end[r]
            r = rec_next[r]
    return ready, ready_pre


@njit(cache=True)
def _record(acc, acc_ptr, i, tr, t_done, head, rec_next, rec_end, rec_track):
    """Record instruction i's accesses as done at ``t_done``. A write drops the records it covers; a
    read drops the reads it covers from its own stream that are done no later, since any later access
    ordered after or waiting on such a read waits at least as long on this one. Without that, a tile
    read over and over and never written keeps every read and the schedule turns quadratic."""
    for k in range(acc_ptr[i], acc_ptr[i + 1]):
        space = acc[k, 0]
        writes = acc[k, 5] == 1
        prev = -1
        r = head[space]
        while r != -1:
            nxt = rec_next[r]
            if _covers(acc, k, r) and (writes or (acc[r, 5] == 0 and rec_track[r] == tr
                                                  and rec_end[r] <= t_done)):
                if prev == -1:
                    head[space] = nxt
                else:
                    rec_next[prev] = nxt
            else:
                prev = r
            r = nxt
        rec_end[k] = t_done
        rec_track[k] = tr
        rec_next[k] = head[space]
        head[space] = k


@njit(cache=True)
def _busy_since(mm_s, mm_e, n_mm, t0, t1):
    """TensorE time spent in MultiplyMoving steps within [t0, t1) (steps are in order)."""
    total = 0.0
    k = n_mm - 1
    while k >= 0 and mm_e[k] > t0:
        total += max(0.0, min(mm_e[k], t1) - max(mm_s[k], t0))
        k -= 1
    return total


@njit(cache=True)
def _dma_window(busy_s, busy_e, busy_n, e, t, duration):
    """Earliest start >= t at which engine e is free for ``duration``."""
    n = busy_n[e]
    k = np.searchsorted(busy_e[e, :n], t, side="right")  # first interval ending after t
    while k < n and busy_s[e, k] < t + duration:
        t = max(t, busy_e[e, k])
        k += 1
    return t


@njit(cache=True)
def _dma_occupy(busy_s, busy_e, busy_n, e, s, f):
    """Add [s, f) to engine e's busy intervals (it overlaps none of them)."""
    n = busy_n[e]
    k = np.searchsorted(busy_s[e, :n], s)
    joins_prev = k > 0 and busy_e[e, k - 1] >= s
    joins_next = k < n and busy_s[e, k] <= f
    if joins_prev and joins_next:
        busy_e[e, k - 1] = busy_e[e, k]
        busy_s[e, k:n - 1] = busy_s[e, k + 1:n]
        busy_e[e, k:n - 1] = busy_e[e, k + 1:n]
        busy_n[e] = n - 1
    elif joins_prev:
        busy_e[e, k - 1] = f
    elif joins_next:
        busy_s[e, k] = s
    else:
        busy_s[e, k + 1:n + 1] = busy_s[e, k:n].copy()
        busy_e[e, k + 1:n + 1] = busy_e[e, k:n].copy()
        busy_s[e, k] = s
        busy_e[e, k] = f
        busy_n[e] = n + 1


@njit(cache=True, inline="always")
def _overlap(acc, a, b):
    return acc[a, 1] < acc[b, 2] and acc[b, 1] < acc[a, 2] and acc[a, 3] < acc[b, 4] and acc[b, 3] < acc[a, 4]


@njit(cache=True, inline="always")
def _covers(acc, w, r):
    return (acc[w, 1] <= acc[r, 1] and acc[r, 2] <= acc[w, 2]
            and acc[w, 3] <= acc[r, 3] and acc[r, 4] <= acc[w, 4])
