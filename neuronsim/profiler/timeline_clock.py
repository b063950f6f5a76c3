"""The report's device timeline on the simulated device clock.

``neuronsim profile`` writes device ops at the host times they were issued, so that Perfetto and
Holistic Trace Analysis line them up with the host ops that issued them. Between two device ops
there is then the simulator's own host time — Python, tracing, the simulation — which says nothing
about the device. The report draws the device as its clock ran: each op slice carries
``args.simulated_start_ns``, and everything else of its process (instructions, counters) lies
inside an op and moves with it. Op slices without one, after the last that has one (the ops a
capped trace aggregates, "N ops (aggregated)"), follow back to back, each as long as its
``args.busy_ns``. Processes without such slices (NKI launches) have their op-row slices laid back
to back after the device ops, in issue order, as the summary counts them.

Tracks are columns (``Track``: numpy start/end in the trace's microseconds, and lists of names,
categories and args); mapping them is vectorized.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class Track:
    """One (process, thread)'s slices as columns."""

    __slots__ = ("start", "end", "name", "cat", "args")

    def __init__(self) -> None:
        self.start: list | np.ndarray = []
        self.end: list | np.ndarray = []
        self.name: list = []
        self.cat: list = []
        self.args: list = []

    def __len__(self) -> int:
        return len(self.name)

    def freeze(self) -> None:
        self.start = np.asarray(self.start, dtype=np.float64)
        self.end = np.asarray(self.end, dtype=np.float64)


class ClockMap:
    """Trace time inside interval i goes to ``new[i] + (t - start[i])``; in a gap, to the end of the
    interval before it (the device is idle between ops on its own clock)."""

    def __init__(self, start: np.ndarray, end: np.ndarray, new: np.ndarray):
        order = np.argsort(start, kind="stable")
        self.start, self.end, self.new = start[order], end[order], new[order]

    def __call__(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        if not self.start.size:
            return t
        i = np.searchsorted(self.start, t, side="right") - 1
        before = i < 0
        i = np.maximum(i, 0)
        out = self.new[i] + np.minimum(t - self.start[i], self.end[i] - self.start[i])
        return np.where(before, self.new[0], out)


def _simulated_starts(track: Track) -> np.ndarray | None:
    """Each slice's ``args.simulated_start_ns`` in us (NaN where absent); None when none has one."""
    values = [a.get("simulated_start_ns") if isinstance(a, dict) else None for a in track.args]
    if not any(isinstance(v, int | float) for v in values):
        return None
    return np.array([v / 1000.0 if isinstance(v, int | float) else np.nan for v in values], dtype=np.float64)


def _union(spans: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.concatenate([s for s, _ in spans] or [np.empty(0)])
    ends = np.concatenate([e for _, e in spans] or [np.empty(0)])
    if not starts.size:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(starts.size, bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, starts.size - 1)
    return starts[first], reach[last]


def is_instruction_track(track: Track) -> bool:
    return any(isinstance(a, dict) and "opcode" in a for a in track.args[:64])


def device_clocks(device_pids: list, tracks: dict) -> dict:
    """Per device process, a :class:`ClockMap` from trace time to simulated device time (us);
    ``retime`` applies them. Tail slices (see the module docstring) are laid out here, in place."""
    maps, end_us, rest = {}, 0.0, []
    for pid in device_pids:
        parts, sims = [], {}
        for key, track in tracks.items():
            if key[0] == pid:
                sim = _simulated_starts(track)
                if sim is not None:
                    sims[key] = sim
                    keep = ~np.isnan(sim)
                    parts.append((track.start[keep], track.end[keep], sim[keep]))
        if not parts:
            rest.append(pid)
            continue
        start, end, new = (np.concatenate(c) for c in zip(*parts, strict=True))
        clock = ClockMap(start, end, new)
        pid_end = float((new + end - start).max())
        maps[pid] = _with_tail(clock, pid, tracks, sims, float(end.max()), pid_end)
        end_us = max(end_us, pid_end + sum(getattr(maps[pid], "tail_us", ())))
    spans = [(t.start, t.end) for key, t in tracks.items() if key[0] in rest and not is_instruction_track(t)]
    lo, hi = _union(spans)  # the launches' op slices over all their cores, overlaps merged
    new = end_us + np.concatenate([[0.0], np.cumsum(hi - lo)[:-1]]) if lo.size else lo
    shared = ClockMap(lo, hi, new)
    for pid in rest:
        maps[pid] = shared
    return maps


class _TailedClock:
    """A process's clock with its tail slices' own places: ``{(key, index): (start, end)}`` in
    simulated us, applied by :func:`retime` after the mapping."""

    def __init__(self, clock: ClockMap, places: dict):
        self.clock, self.places = clock, places
        self.tail_us = [e - s for s, e in places.values()]

    def __call__(self, t):
        return self.clock(t)


def _with_tail(clock: ClockMap, pid, tracks: dict, sims: dict, host_end: float, sim_end: float):
    tail = []
    for key, track in tracks.items():
        if key[0] != pid or is_instruction_track(track):
            continue
        sim = sims.get(key)
        missing = np.isnan(sim) if sim is not None else np.ones(len(track), bool)
        for i in np.flatnonzero(missing & (track.start >= host_end - 1e-9)).tolist():
            args = track.args[i] if isinstance(track.args[i], dict) else {}
            busy = args.get("busy_ns")
            dur = busy / 1000.0 if isinstance(busy, int | float) else float(track.end[i] - track.start[i])
            tail.append((float(track.start[i]), key, i, dur))
    if not tail:
        return clock
    places, cursor = {}, sim_end
    for _, key, i, dur in sorted(tail, key=lambda x: x[0]):
        places[(key, i)] = (cursor, cursor + dur)
        cursor += dur
    return _TailedClock(clock, places)


def retime(tracks: dict, counters: dict, maps: dict) -> None:
    """Move every slice (keeping its duration) and counter sample of a mapped process."""
    for key, track in tracks.items():
        f = maps.get(key[0])
        if f is not None:
            start = f(track.start)
            track.end = start + (track.end - track.start)
            track.start = start
            for (k, i), (s, e) in getattr(f, "places", {}).items():
                if k == key:
                    track.start[i], track.end[i] = s, e
    for key, samples in counters.items():
        f = maps.get(key[0])
        if f is not None and samples:
            moved = f(np.array([t for t, _ in samples]))
            counters[key] = [(float(t), v) for t, (_, v) in zip(moved, samples, strict=True)]
