"""The HTML report's timelines: a Chrome trace reduced to rows of slices, compact enough to embed.

Two parts, on two clocks. The device part — processes named ``neuron:...`` — is on the simulated
device clock: a trace written in host time (so that Perfetto lines device ops up with the host ops
that issued them) has the simulator's own host time between device ops, which is not the
device's; each op's ``args.simulated_start_ns`` puts it back where the device clock ran it, and
its instructions and counters move with it (see ``timeline_clock.py``). The host part (every
other process: ``neuronsim profile``'s host track, torch.profiler's ops) keeps wall-clock time,
and is drawn apart.

Generic over tracks: every (process, thread) with slices is a row, named by the trace's metadata
(``process_name`` / ``thread_name``, ordered by their sort indices), so new engine tracks or a
torch.profiler host trace need nothing here. A row whose slices carry an ``opcode`` is an
instruction row (an engine or a DMA queue); a device op row (``Device ops``: many op names on one
track) also gets one child row per op name, the longest ops first. Counters (``ph: C``) are
step-chart rows after their process's slice rows. Overlapping or nested slices of a row
(torch.profiler's host ops nest) go to lanes, first fit, at most ``MAX_LANES``; deeper slices are
counted, not drawn.

Size: at most ``REPORT_MAX_SLICES`` slices are embedded — more than the largest trace
``neuronsim profile`` writes by default (200,000 instruction and counter events, 200,000 op
events, 200,000 host slices). Past it, the longest rows are aggregated (runs of consecutive
slices drawn as one, "N slices (aggregated)") until the total fits, and the report says so.
Counters keep at most ``REPORT_MAX_COUNTER_SAMPLES`` samples (the maximum of each run kept).

Encoding, per lane: ``t`` start times as deltas from the previous start, ``d`` durations, both in
integer nanoseconds from the part's first event; ``n`` an index into ``names``; ``a`` an index into
``details`` (the slice's ``cat`` and ``args``, shared by identical slices — the same instruction in
every run of a kernel), or -1; instruction rows also ``o``, the name index of the op (or launch)
each instruction ran in, or -1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from neuronsim.profiler.timeline_clock import Track, device_clocks, is_instruction_track, retime

SCHEMA = "neuronsim-report-timeline/1"
REPORT_MAX_SLICES = 650_000
REPORT_MAX_COUNTER_SAMPLES = 200_000
MAX_DETAILS = 100_000  # distinct hover records; slices past it show their name and times only
MAX_LANES = 6
MAX_OP_CHILD_ROWS = 40
DEVICE_PREFIX = "neuron:"
# Per-event args that differ between otherwise identical slices and that the report shows anyway
# (times) or has no use for (torch.profiler's ids): left out so identical slices share one record.
VOLATILE_ARGS = frozenset({
    "simulated_start_ns", "duration_ns", "External id", "Ev Idx", "Record function id", "Sequence number",
    "Fwd thread id", "correlation", "Python id", "Python parent id", "Python thread",
})


class _Strings:
    """A string (or record) table: each distinct key gets the next index."""

    def __init__(self) -> None:
        self.ids: dict = {}
        self.items: list = []

    def id(self, key, value=None) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.items)
            self.items.append(key if value is None else value)
        return i


class _Details(_Strings):
    """Hover records: a slice's ``cat`` and ``args`` without the volatile keys; identical slices
    share one record (looked up by ``repr``, which is cheap and equal for equal dicts built the same
    way). Past ``MAX_DETAILS`` records, new ones are -1."""

    def of(self, cat, args) -> int:
        if not args and not cat:
            return -1
        key = (cat, repr(args))
        i = self.ids.get(key)
        if i is not None:
            return i
        if len(self.items) >= MAX_DETAILS:
            return -1
        kept = {k: v for k, v in (args or {}).items() if k not in VOLATILE_ARGS}
        if cat:
            kept["cat"] = cat
        if len(kept) != len(args or {}) + bool(cat):  # volatile keys dropped: share with equal records
            canonical = ("canonical", json.dumps(kept, sort_keys=True, default=str))
            i = self.id(canonical, kept)
            self.ids[key] = i
            return i
        return self.id(key, kept)


def _metadata(events: list) -> tuple[dict, dict, dict, dict]:
    pnames, psort, tnames, tsort = {}, {}, {}, {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "M":
            continue
        name, args, pid = e.get("name"), e.get("args") or {}, e.get("pid")
        if name == "process_name":
            # a pid named twice (torch.profiler names pids 0-15 "python" for GPU lanes): the device wins
            if not str(pnames.get(pid, "")).startswith(DEVICE_PREFIX):
                pnames[pid] = str(args.get("name", pid))
        elif name == "process_sort_index":
            psort[pid] = args.get("sort_index", 0)
        elif name == "thread_name":
            tnames[(pid, e.get("tid"))] = str(args.get("name", e.get("tid")))
        elif name == "thread_sort_index":
            tsort[(pid, e.get("tid"))] = args.get("sort_index", 0)
    return pnames, psort, tnames, tsort


def _collect(events: list) -> tuple[dict, dict]:
    """Slices per track (:class:`Track` columns) and counter samples per (pid, name)."""
    tracks: dict = {}
    counters: dict = {}
    open_b: dict = {}

    def add(key, start, end, e):
        track = tracks.get(key)
        if track is None:
            track = tracks[key] = Track()
        track.start.append(start)
        track.end.append(end)
        track.name.append(e.get("name", ""))
        track.cat.append(e.get("cat", ""))
        track.args.append(e.get("args"))

    number = (int, float)  # isinstance: numpy floats too (a trace built in memory has them)
    for e in events:
        if type(e) is not dict:
            continue
        ph = e.get("ph")
        if ph == "X":
            ts, dur = e.get("ts"), e.get("dur", 0)
            if isinstance(ts, number) and isinstance(dur, number):
                add((e.get("pid"), e.get("tid")), ts, ts + (dur if dur > 0 else 0), e)
        elif ph == "B":
            open_b.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "E":
            stack = open_b.get((e.get("pid"), e.get("tid")))
            if stack:
                b = stack.pop()
                add((b.get("pid"), b.get("tid")), b["ts"], max(e["ts"], b["ts"]), b)
        elif ph == "C" and isinstance(e.get("ts"), number) and isinstance(e.get("args"), dict):
            counters.setdefault((e.get("pid"), e.get("name", "")), []).append((e["ts"], e["args"]))
    for track in tracks.values():
        track.freeze()
    return tracks, counters


def _budgets(counts: dict, cap: int) -> dict:
    """Max-min fair share of ``cap`` slices over the rows: small rows keep all their slices."""
    if sum(counts.values()) <= cap:
        return dict(counts)
    out, remaining = {}, cap
    order = sorted(counts, key=lambda k: counts[k])
    for i, key in enumerate(order):
        fair = max(1, remaining // (len(order) - i))
        out[key] = min(counts[key], fair)
        remaining -= out[key]
    return out


def _sorted(track: Track) -> Track:
    """By start, the longest first among equal starts (a parent before its children)."""
    order = np.lexsort((track.start - track.end, track.start))
    out = Track()
    out.start, out.end = track.start[order], track.end[order]
    out.name = [track.name[i] for i in order]
    out.cat = [track.cat[i] for i in order]
    out.args = [track.args[i] for i in order]
    return out


def _aggregate(track: Track, budget: int) -> Track:
    """Runs of consecutive slices (by start) as one slice each, ``budget`` of them."""
    n = len(track)
    los = np.unique((np.arange(budget) * n) // budget)
    counts = np.diff(np.append(los, n))
    out = Track()
    out.start = track.start[los]
    out.end = np.maximum.reduceat(track.end, los)
    busy = np.add.reduceat(track.end - track.start, los)
    out.name = [f"{c} slices (aggregated)" for c in counts.tolist()]
    out.cat = ["aggregated"] * len(los)
    out.args = [{"aggregated_slices": c, "busy_ns": round(b * 1000, 3), "first": track.name[lo]}
                for c, b, lo in zip(counts.tolist(), busy.tolist(), los.tolist(), strict=True)]
    return out


def _lane_of(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """First-fit lane of each slice (sorted by start); -1 past ``MAX_LANES``. Flat rows (the
    device's) are one lane, found without a loop; ts/dur are rounded to the ns: 1 ns of overlap is allowed."""
    n = start.size
    if n < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1] - 1)):
        return np.zeros(n, np.int64)
    lanes = np.empty(n, np.int64)
    ends: list[int] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        for li, lane_end in enumerate(ends):
            if lane_end <= s + 1:
                ends[li] = e
                lanes[i] = li
                break
        else:
            if len(ends) < MAX_LANES:
                ends.append(e)
                lanes[i] = len(ends) - 1
            else:
                lanes[i] = -1
    return lanes


def _lanes(track: Track, origin: float, names: _Strings, details: _Details,
           ops: list | None = None) -> tuple[list, int]:
    """The row's lanes, encoded (see the module docstring); returns (lanes, slices not drawn).
    ``ops``: the name of the op each slice ran in (an instruction row's), or None."""
    start = np.rint((track.start - origin) * 1000).astype(np.int64)
    end = np.maximum(start, np.rint((track.end - origin) * 1000).astype(np.int64))
    lane_of = _lane_of(start, end)
    name_ids = [names.id(str(n)) for n in track.name]
    detail_ids = [details.of(c, a) for c, a in zip(track.cat, track.args, strict=True)]
    lanes = []
    for li in range(int(lane_of.max(initial=-1)) + 1):
        idx = np.flatnonzero(lane_of == li)
        s = start[idx]
        idx_list = idx.tolist()
        lane = {"t": np.diff(s, prepend=0).tolist(), "d": (end[idx] - s).tolist(),
                "n": [name_ids[i] for i in idx_list], "a": [detail_ids[i] for i in idx_list]}
        if ops is not None:
            lane["o"] = [names.id(ops[i]) if ops[i] is not None else -1 for i in idx_list]
        lanes.append(lane)
    return lanes, int((lane_of < 0).sum())


def _enclosing_ops(op_tracks: list) -> tuple[np.ndarray, np.ndarray, list]:
    """A process's op slices (device ops, launches), sorted: (starts, ends, names)."""
    starts = np.concatenate([t.start for t in op_tracks] or [np.empty(0)])
    ends = np.concatenate([t.end for t in op_tracks] or [np.empty(0)])
    names = [n for t in op_tracks for n in t.name]
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order], [names[i] for i in order.tolist()]


def _op_of(track: Track, ops: tuple) -> list:
    """The op each slice of ``track`` lies in (by its start), or None."""
    starts, ends, names = ops
    if not starts.size:
        return [None] * len(track)
    i = np.searchsorted(starts, track.start, side="right") - 1
    inside = (i >= 0) & (track.start <= ends[np.maximum(i, 0)] + 1e-6)
    return [names[k] if ok else None for k, ok in zip(i.tolist(), inside.tolist(), strict=True)]


def _op_children(row: dict, names: list, group_has_instructions: bool) -> list[dict]:
    """One child row per op name of a flat op row, the longest ops first; the rest in one row."""
    lane = row["lanes"][0]
    by_name: dict[int, list] = {}
    for i, (n, d) in enumerate(zip(lane["n"], lane["d"], strict=True)):
        entry = by_name.setdefault(n, [0, []])
        entry[0] += d
        entry[1].append(i)
    if len(by_name) < 2:
        return []
    order = sorted(by_name, key=lambda n: (-by_name[n][0], names[n]))
    kids = [(names[n], by_name[n][1]) for n in order[:MAX_OP_CHILD_ROWS]]
    rest = sorted(i for n in order[MAX_OP_CHILD_ROWS:] for i in by_name[n][1])
    if rest:
        kids.append((f"{len(order) - MAX_OP_CHILD_ROWS} other ops", rest))
    out = []
    for label, idx in kids:
        deltas = [idx[0]] + [b - a for a, b in zip(idx, idx[1:], strict=False)]
        out.append({"name": label, "kind": "op-name", "group": row["group"], "idx": deltas,
                    "open": not group_has_instructions})
    return out


def _number(v) -> float:
    return round(float(v), 6) if isinstance(v, int | float) else 0.0


def _counter_rows(samples: list, origin: float, budget: int) -> tuple[list, dict]:
    samples.sort(key=lambda s: s[0])
    series: dict = {}
    for _, args in samples:
        for k in args:
            series.setdefault(k, None)
    if len(samples) > budget:  # keep each run's maximum: peaks stay visible
        n, kept = len(samples), []
        for k in range(budget):
            chunk = samples[k * n // budget:(k + 1) * n // budget]
            if chunk:
                peaks = {s: max(float(c[1].get(s, 0) or 0) for c in chunk) for s in series}
                kept.append((chunk[0][0], peaks))
        samples = kept
    at = np.rint((np.array([t for t, _ in samples], dtype=np.float64) - origin) * 1000).astype(np.int64)
    values = {s: [_number(args.get(s, 0)) for _, args in samples] for s in series}
    return np.diff(at, prepend=0).tolist(), values


def timeline_models(trace: Mapping, *, max_slices: int = REPORT_MAX_SLICES,
                    max_counter_samples: int = REPORT_MAX_COUNTER_SAMPLES) -> dict[str, dict]:
    """``{"device": model, "host": model}`` of ``trace`` (a part only when it has tracks).

    The device part is on the simulated device clock (see ``timeline_clock.py``); the host part
    keeps the trace's wall-clock time. Each part's time 0 is its first event."""
    events = trace.get("traceEvents", [])
    pnames, psort, tnames, tsort = _metadata(events)
    tracks, counters = _collect(events)

    def device(pid) -> bool:
        return str(pnames.get(pid, "")).startswith(DEVICE_PREFIX)

    pids = sorted({k[0] for k in tracks} | {k[0] for k in counters}, key=lambda p: (psort.get(p, 0), str(p)))
    retime(tracks, counters, device_clocks([p for p in pids if device(p)], tracks))
    budgets = _budgets({k: len(v) for k, v in tracks.items()}, max_slices)
    per_counter = max(16, max_counter_samples // max(1, len(counters)))
    out = {}
    parts = {"device": [p for p in pids if device(p)], "host": [p for p in pids if not device(p)]}
    for part, chosen in parts.items():
        if chosen:
            out[part] = _part_model(part, chosen, pnames, tnames, tsort, tracks, counters, budgets,
                                    per_counter)
            out[part]["stats"]["max_slices"] = max_slices
    return out


def _part_model(part: str, pids: list, pnames: dict, tnames: dict, tsort: dict, tracks: dict, counters: dict,
                budgets: dict, per_counter: int) -> dict:
    keys_of = {pid: sorted((k for k in tracks if k[0] == pid), key=lambda k: (tsort.get(k, 0), str(k[1])))
               for pid in pids}
    mine = [tracks[k] for pid in pids for k in keys_of[pid]]
    firsts = [float(t.start.min()) for t in mine if len(t)]
    firsts += [min(c[0] for c in cs) for k, cs in counters.items() if k[0] in pids and cs]
    origin = min(firsts, default=0.0)
    names, details = _Strings(), _Details()
    groups, rows = [], []
    aggregated = dropped = source = 0
    for gi, pid in enumerate(pids):
        groups.append({"name": pnames.get(pid, str(pid)), "kind": part})
        group_rows = []
        is_instructions = {key: is_instruction_track(tracks[key]) for key in keys_of[pid]}
        ops = _enclosing_ops([tracks[k] for k in keys_of[pid] if not is_instructions[k]])
        for key in keys_of[pid]:
            track = _sorted(tracks[key])
            source += len(track)
            instructions = is_instructions[key]
            if budgets[key] < len(track):
                aggregated += len(track)
                track = _aggregate(track, budgets[key])
            lanes, deep = _lanes(track, origin, names, details, _op_of(track, ops) if instructions else None)
            dropped += deep
            group_rows.append({"name": tnames.get(key, str(key[1])), "group": gi,
                               "kind": "instruction" if instructions else "op", "lanes": lanes})
        has_instructions = any(r["kind"] == "instruction" for r in group_rows)
        for row in group_rows:
            rows.append(row)
            if part == "device" and row["kind"] == "op" and len(row["lanes"]) == 1:
                parent = len(rows) - 1
                for child in _op_children(row, names.items, has_instructions):
                    rows.append({**child, "parent": parent})
        for key in sorted((k for k in counters if k[0] == pid), key=lambda k: str(k[1])):
            t, values = _counter_rows(counters[key], origin, per_counter)
            rows.append({"name": str(key[1]), "group": gi, "kind": "counter", "t": t, "series": values})
    last = max((float(t.end.max()) for t in mine if len(t)), default=origin)
    span = max(1, round((last - origin) * 1000))
    drawn = sum(len(lane["t"]) for r in rows if "lanes" in r for lane in r["lanes"])
    return {
        "schema": SCHEMA,
        "clock": "simulated" if part == "device" else "wall",
        "span_ns": span,
        "focus_ns": [0, span],
        "groups": groups,
        "rows": rows,
        "names": names.items,
        "details": details.items,
        "stats": {"slices": drawn, "source_slices": source, "aggregated_slices": aggregated,
                  "undrawn_nested_slices": dropped, "details_capped": len(details.items) >= MAX_DETAILS},
    }


def model_json(model: Mapping) -> str:
    """JSON safe inside ``<script type="application/json">``."""
    return json.dumps(model, separators=(",", ":")).replace("</", "<\\/")
