"""Timing: dependencies from memory-region overlaps, in-order engines, documented costs.

``schedule_program`` turns a validated Program into a :class:`Timeline`: every instruction's track,
start and end in nanoseconds. Data-independent, so it is computed once per Program and cached.

- Each compute engine issues its stream in order; each DMA queue is a stream too.
- An instruction starts when its stream is free and every earlier instruction it conflicts with
  (RAW, WAR, WAW on overlapping memory: the semaphores the compiler inserts) has finished.
- A DMA transfer also waits for the DMA engines it uses (one transfer at a time per engine). It
  takes the earliest window in which they are all free, even one before a transfer issued earlier
  that is still waiting for its data: a queued transfer does not hold the engines, so transfers on
  other queues run meanwhile.
- TensorE starts a burst throttled to ``tensor_throttle_start_fraction`` and ramps to full rate over
  ``tensor_throttle_ramp_ns``; an idle gap of ``tensor_throttle_idle_reset_ns`` starts a new burst.

An indirect DMA's indexed side (``engines/dma_indirect.py``) counts as its whole tensor.
Regions are bounding boxes — (memory space, partitions [p0, p1), bytes [b0, b1)) — in physical
SBUF/PSUM coordinates, so two tensors sharing bytes (rotating buffers) depend on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.dma import transfer_engines, transfer_ns
from neuronsim.sim.engines.dma_indirect import descriptor_ns, indexed_side
from neuronsim.sim.ir import COMPUTE_ENGINES, INDIRECT_OPS, AccessPattern, Engine, Memory, Program
from neuronsim.sim.memory.layout import Placement

N_COMPUTE_TRACKS = 5  # tensor, vector, scalar, gpsimd, sync; DMA queue q is track 5 + q
DMA_TRACK0 = 5


def track_name(track: int) -> str:
    if track < DMA_TRACK0:
        return Engine(track).name.lower()
    return f"dma_q{track - DMA_TRACK0}"


@dataclass(frozen=True)
class Timeline:
    """When each instruction ran. Times in nanoseconds from the Program's start."""

    track: np.ndarray  # int64 per instruction: engine (0..4) or DMA_TRACK0 + queue
    start_ns: np.ndarray
    end_ns: np.ndarray
    dma_first_engine: np.ndarray  # -1 for non-DMA instructions
    dma_engine_count: np.ndarray
    n_dma_engines: int
    engine_busy_ns: dict[str, float] = field(default_factory=dict)

    @property
    def total_ns(self) -> float:
        return float(self.end_ns.max()) if self.end_ns.size else 0.0

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
        return 2 + t.id, 0, 1, first * item, (last + 1) * item
    row0, col0 = divmod(ap.offset, t.free_size)
    p0 = placement.start_partition[t.id] + row0
    b0 = placement.byte_offset[t.id] + (col0 + lo) * item
    b1 = placement.byte_offset[t.id] + (col0 + hi + 1) * item
    return (0 if t.memory is Memory.SBUF else 1), p0, p0 + ap.partitions, b0, b1


@dataclass(frozen=True)
class ScheduleInputs:
    """Everything the Numba scheduler needs, as arrays (data-independent)."""

    track: np.ndarray
    cycles: np.ndarray  # engine cycles (compute) ...
    fixed_ns: np.ndarray  # ... or nanoseconds (DMA)
    dma_first: np.ndarray
    dma_count: np.ndarray
    acc_ptr: np.ndarray  # accesses of instruction i are acc_*[acc_ptr[i]:acc_ptr[i+1]]
    acc: np.ndarray  # [n_acc, 6]: space, p0, p1, b0, b1, is_write
    clock_ghz: np.ndarray  # per compute track


def schedule_inputs(program: Program, chip: ChipSpec, placement: Placement) -> ScheduleInputs:
    n = len(program.instructions)
    track = np.empty(n, np.int64)
    cycles = np.zeros(n, np.float64)
    fixed_ns = np.zeros(n, np.float64)
    dma_first = np.full(n, -1, np.int64)
    dma_count = np.zeros(n, np.int64)
    acc_ptr = np.zeros(n + 1, np.int64)
    acc: list[tuple[int, ...]] = []
    for i, ins in enumerate(program.instructions):
        if ins.engine is Engine.DMA:
            track[i] = DMA_TRACK0 + ins.queue
            sbuf_side = ins.dst if ins.dst.memory is not Memory.HBM else ins.srcs[0]
            start = _region(sbuf_side, placement, chip)[1] if sbuf_side.memory is not Memory.HBM else 0
            first, count = transfer_engines(ins, chip, start)
            dma_first[i], dma_count[i] = first, count
            fixed_ns[i] = transfer_ns(ins, chip, count) + descriptor_ns(ins, chip)
        else:
            track[i] = int(ins.engine)
            cycles[i] = OPDEFS[ins.opcode].cycles(ins, chip)
        indirect = indexed_side(ins) if ins.opcode in INDIRECT_OPS else None
        for ap, is_write in ins.accesses():
            if ap is indirect:  # its bytes are known only at run time: all of its tensor
                ap = ap.tensor.ap()
            acc.append((*_region(ap, placement, chip), int(is_write)))
        acc_ptr[i + 1] = len(acc)
    clock = np.zeros(N_COMPUTE_TRACKS, np.float64)
    for e in COMPUTE_ENGINES:
        clock[int(e)] = chip.clock_hz(e.clock_name) / 1e9
    acc_arr = np.array(acc, dtype=np.int64).reshape(len(acc), 6)
    return ScheduleInputs(track, cycles, fixed_ns, dma_first, dma_count, acc_ptr, acc_arr, clock)


def schedule_program(program: Program, chip: ChipSpec, placement: Placement) -> Timeline:
    inp = schedule_inputs(program, chip, placement)
    n_tracks = DMA_TRACK0 + chip.dma_queues_per_engine
    start, end = schedule_arrays(
        inp.track, inp.cycles, inp.fixed_ns, inp.dma_first, inp.dma_count, inp.acc_ptr, inp.acc,
        inp.clock_ghz, n_tracks, chip.dma_engines, 2 + len(program.tensors),
        chip.tensor_throttle_start_fraction, chip.tensor_throttle_ramp_ns, chip.tensor_throttle_idle_reset_ns,
    )
    busy: dict[str, float] = {}
    for t in np.unique(inp.track):
        mask = inp.track == t
        busy[track_name(int(t))] = float((end[mask] - start[mask]).sum())
    return Timeline(inp.track, start, end, inp.dma_first, inp.dma_count, chip.dma_engines, busy)


@njit(cache=True)
def schedule_arrays(track, cycles, fixed_ns, dma_first, dma_count, acc_ptr, acc, clock_ghz, n_tracks,
                    n_dma_engines, n_spaces, throttle_start, throttle_ramp_ns, throttle_reset_ns):
    n = track.size
    start = np.zeros(n, np.float64)
    end = np.zeros(n, np.float64)
    track_free = np.zeros(n_tracks, np.float64)
    # Busy intervals of each DMA engine: disjoint, sorted, merged when they touch.
    n_dma = 0
    for i in range(n):
        if dma_first[i] >= 0:
            n_dma += 1
    busy_s = np.empty((n_dma_engines, n_dma + 1), np.float64)
    busy_e = np.empty((n_dma_engines, n_dma + 1), np.float64)
    busy_n = np.zeros(n_dma_engines, np.int64)
    # Live access records, one singly linked list per memory space.
    n_acc = acc.shape[0]
    rec_next = np.full(n_acc, -1, np.int64)
    rec_end = np.zeros(n_acc, np.float64)
    head = np.full(n_spaces, -1, np.int64)
    burst_start = -1.0e30
    tensor_last_end = -1.0e30
    for i in range(n):
        ready = track_free[track[i]]
        # dependencies: any overlapping earlier access where either side writes
        for k in range(acc_ptr[i], acc_ptr[i + 1]):
            space = acc[k, 0]
            r = head[space]
            while r != -1:
                if (acc[k, 5] == 1 or acc[r, 5] == 1) and _overlap(acc, k, r):
                    if rec_end[r] > ready:
                        ready = rec_end[r]
                r = rec_next[r]
        if dma_first[i] >= 0:
            duration = fixed_ns[i]
            e0 = dma_first[i]
            ready = _dma_window(busy_s, busy_e, busy_n, e0, e0 + dma_count[i], ready, duration)
        else:
            duration = cycles[i] / clock_ghz[track[i]]
            if track[i] == 0:  # TensorE dI/dt throttle
                if ready - tensor_last_end > throttle_reset_ns:
                    burst_start = ready
                ramp = (ready - burst_start) / throttle_ramp_ns
                fraction = throttle_start + (1.0 - throttle_start) * min(1.0, ramp)
                duration = duration / fraction
        start[i] = ready
        end[i] = ready + duration
        track_free[track[i]] = end[i]
        if track[i] == 0:
            tensor_last_end = end[i]
        if dma_first[i] >= 0:
            for e in range(dma_first[i], dma_first[i] + dma_count[i]):
                _dma_occupy(busy_s, busy_e, busy_n, e, start[i], end[i])
        # record this instruction's accesses; a write drops the records it fully covers
        for k in range(acc_ptr[i], acc_ptr[i + 1]):
            space = acc[k, 0]
            if acc[k, 5] == 1:
                prev = -1
                r = head[space]
                while r != -1:
                    nxt = rec_next[r]
                    if _covers(acc, k, r):
                        if prev == -1:
                            head[space] = nxt
                        else:
                            rec_next[prev] = nxt
                    else:
                        prev = r
                    r = nxt
            rec_end[k] = end[i]
            rec_next[k] = head[space]
            head[space] = k
    return start, end


@njit(cache=True)
def _dma_window(busy_s, busy_e, busy_n, e0, e1, t, duration):
    """Earliest start >= t at which engines [e0, e1) are all free for ``duration``."""
    moved = True
    while moved:
        moved = False
        for e in range(e0, e1):
            n = busy_n[e]
            k = np.searchsorted(busy_e[e, :n], t, side="right")  # first interval ending after t
            if k < n and busy_s[e, k] < t + duration:
                t = busy_e[e, k]
                moved = True
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
    return acc[w, 1] <= acc[r, 1] and acc[r, 2] <= acc[w, 2] and acc[w, 3] <= acc[r, 3] and acc[r, 4] <= acc[w, 4]
