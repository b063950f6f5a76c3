"""The HTML report's timelines: a Chrome trace reduced to rows of slices, compact enough to embed.

Two parts, on two clocks. The device part — processes named ``neuron:...`` — is on the simulated
device clock: a trace written in host time (so that Perfetto lines device ops up with the host ops
that issued them) has the simulator's own host time between device ops, which is not the
device's; each op's ``args.simulated_start_ns`` puts it back where the device clock ran it, and
its instructions and counters move with it (see :func:`_device_clocks`). The host part (every
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
every run of a kernel), or -1.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping

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
    def __init__(self) -> None:
        self.ids: dict = {}
        self.items: list = []

    def id(self, key, value=None) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.items)
            self.items.append(key if value is None else value)
        return i


def _metadata(events: list) -> tuple[dict, dict, dict, dict]:
    pnames, psort, tnames, tsort = {}, {}, {}, {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "M":
            continue
        name, args, pid = e.get("name"), e.get("args") or {}, e.get("pid")
        if name == "process_name":
            pnames[pid] = str(args.get("name", pid))
        elif name == "process_sort_index":
            psort[pid] = args.get("sort_index", 0)
        elif name == "thread_name":
            tnames[(pid, e.get("tid"))] = str(args.get("name", e.get("tid")))
        elif name == "thread_sort_index":
            tsort[(pid, e.get("tid"))] = args.get("sort_index", 0)
    return pnames, psort, tnames, tsort


def _collect(events: list) -> tuple[dict, dict]:
    """Slices per track as [start_us, end_us, name, cat, args] and counter samples per (pid, name)."""
    tracks: dict = {}
    counters: dict = {}
    open_b: dict = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "X":
            ts, dur = e.get("ts"), e.get("dur", 0)
            if isinstance(ts, int | float) and isinstance(dur, int | float):
                tracks.setdefault((e.get("pid"), e.get("tid")), []).append(
                    (ts, ts + max(dur, 0), e.get("name", ""), e.get("cat", ""), e.get("args")))
        elif ph == "B":
            open_b.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "E":
            stack = open_b.get((e.get("pid"), e.get("tid")))
            if stack:
                b = stack.pop()
                tracks.setdefault((b.get("pid"), b.get("tid")), []).append(
                    (b["ts"], max(e["ts"], b["ts"]), b.get("name", ""), b.get("cat", ""), b.get("args")))
        elif ph == "C" and isinstance(e.get("ts"), int | float) and isinstance(e.get("args"), dict):
            counters.setdefault((e.get("pid"), e.get("name", "")), []).append((e["ts"], e["args"]))
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


def _aggregate(slices: list, budget: int) -> list:
    """Runs of consecutive slices (by start) as one slice each, ``budget`` of them."""
    n = len(slices)
    out = []
    for k in range(budget):
        lo, hi = k * n // budget, (k + 1) * n // budget
        if hi <= lo:
            continue
        chunk = slices[lo:hi]
        busy = sum(s[1] - s[0] for s in chunk)
        end = max(s[1] for s in chunk)
        out.append((chunk[0][0], end, f"{len(chunk)} slices (aggregated)", "aggregated",
                    {"aggregated_slices": len(chunk), "busy_ns": round(busy * 1000, 3), "first": chunk[0][2]}))
    return out


def _detail_key(cat, args) -> tuple | None:
    if not args and not cat:
        return None
    kept = {k: v for k, v in (args or {}).items() if k not in VOLATILE_ARGS}
    if cat:
        kept["cat"] = cat
    return json.dumps(kept, sort_keys=True, default=str), kept


def _lanes(slices: list, origin: float, names: _Strings, details: _Strings) -> tuple[list, int]:
    """First-fit lanes of a row's slices (sorted by start, longest first); returns (lanes, not drawn)."""
    lanes: list[dict] = []
    ends: list[int] = []
    last_start: list[int] = []
    dropped = 0
    for s, e, name, cat, args in slices:
        start = round((s - origin) * 1000)
        end = max(start, round((e - origin) * 1000))
        for li, lane_end in enumerate(ends):
            if lane_end <= start + 1:  # ts/dur are rounded to the ns: allow 1 ns of overlap
                break
        else:
            if len(lanes) >= MAX_LANES:
                dropped += 1
                continue
            lanes.append({"t": [], "d": [], "n": [], "a": []})
            ends.append(0)
            last_start.append(0)
            li = len(lanes) - 1
        lane = lanes[li]
        lane["t"].append(start - last_start[li])
        lane["d"].append(end - start)
        lane["n"].append(names.id(str(name)))
        key = _detail_key(cat, args)
        if key is None:
            lane["a"].append(-1)
        elif key[0] in details.ids or len(details.items) < MAX_DETAILS:
            lane["a"].append(details.id(key[0], key[1]))
        else:
            lane["a"].append(-1)
        last_start[li] = start
        ends[li] = end
    return lanes, dropped


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


def _counter_rows(samples: list, origin: float, budget: int) -> tuple[list, dict]:
    samples.sort(key=lambda s: s[0])
    series = []
    for _, args in samples:
        for k in args:
            if k not in series:
                series.append(k)
    if len(samples) > budget:  # keep each run's maximum: peaks stay visible
        n, kept = len(samples), []
        for k in range(budget):
            chunk = samples[k * n // budget:(k + 1) * n // budget]
            if chunk:
                kept.append((chunk[0][0], {s: max(float(c[1].get(s, 0) or 0) for c in chunk) for s in series}))
        samples = kept
    t, prev = [], 0
    values = {s: [] for s in series}
    for ts, args in samples:
        at = round((ts - origin) * 1000)
        t.append(at - prev)
        prev = at
        for s in series:
            v = args.get(s, 0)
            values[s].append(round(float(v), 6) if isinstance(v, int | float) else 0.0)
    return t, values


def _intervals_to(pairs: list) -> tuple[list, list, list]:
    """Sorted (host start, host end, new start) lists of a time mapping."""
    pairs.sort()
    return [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]


def _mapper(starts: list, ends: list, new: list):
    """Map a time inside interval i to ``new[i] + (t - starts[i])``; in a gap, to the end of the
    interval before it (a device is idle between ops on its own clock)."""
    def f(t: float) -> float:
        i = bisect_right(starts, t) - 1
        if i < 0:
            return new[0] if new else t
        return new[i] + min(t - starts[i], ends[i] - starts[i])
    return f


def _device_clocks(device_pids: list, tracks: dict, counters: dict) -> dict:
    """Per device process, a function from trace time (us) to simulated device time (us).

    A device op slice says where its op ran on the device clock (``args.simulated_start_ns``);
    everything else of its process (instructions, counters) sits inside an op and moves with it.
    Processes without such slices (NKI launches) have their op-row slices laid back to back, after
    the device ops, in the order they were issued — as the summary counts them."""
    maps, end_us = {}, 0.0
    rest = []
    for pid in device_pids:
        pairs = [(s[0], s[1], float(s[4]["simulated_start_ns"]) / 1000.0)
                 for (p, _), sl in tracks.items() if p == pid for s in sl
                 if isinstance(s[4], dict) and isinstance(s[4].get("simulated_start_ns"), int | float)]
        if not pairs:
            rest.append(pid)
            continue
        maps[pid] = _mapper(*_intervals_to(pairs))
        end_us = max(end_us, max(p[2] + p[1] - p[0] for p in pairs))
    spans = sorted((s[0], s[1]) for (p, _), sl in tracks.items() if p in rest for s in sl
                   if not (isinstance(s[4], dict) and "opcode" in s[4]))
    merged: list[list[float]] = []
    for lo, hi in spans:  # union of the launches' op slices, over all their cores
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    pairs, cursor = [], end_us
    for lo, hi in merged:
        pairs.append((lo, hi, cursor))
        cursor += hi - lo
    shared = _mapper(*_intervals_to(pairs)) if pairs else (lambda t: t)
    for pid in rest:
        maps[pid] = shared
    return maps


def _retime(tracks: dict, counters: dict, maps: dict) -> None:
    for key, sl in tracks.items():
        f = maps.get(key[0])
        if f is not None:
            tracks[key] = [(f(s[0]), f(s[0]) + (s[1] - s[0]), *s[2:]) for s in sl]
    for key, cs in counters.items():
        f = maps.get(key[0])
        if f is not None:
            counters[key] = [(f(t), v) for t, v in cs]


def timeline_models(trace: Mapping, *, max_slices: int = REPORT_MAX_SLICES,
                    max_counter_samples: int = REPORT_MAX_COUNTER_SAMPLES) -> dict[str, dict]:
    """``{"device": model, "host": model}`` of ``trace`` (a part only when it has tracks).

    The device part is on the simulated device clock (see :func:`_device_clocks`): where the
    trace has device ops at the host times they were issued (so that they line up with host ops in
    Perfetto), the gaps between them are the simulator's own host time, not the device's. The
    host part keeps the trace's wall-clock time. Each part's time 0 is its first event."""
    events = list(trace.get("traceEvents", []))
    pnames, psort, tnames, tsort = _metadata(events)
    tracks, counters = _collect(events)

    def device(pid) -> bool:
        return str(pnames.get(pid, "")).startswith(DEVICE_PREFIX)

    pids = sorted({k[0] for k in tracks} | {k[0] for k in counters}, key=lambda p: (psort.get(p, 0), str(p)))
    _retime(tracks, counters, _device_clocks([p for p in pids if device(p)], tracks, counters))
    budgets = _budgets({k: len(v) for k, v in tracks.items()}, max_slices)
    per_counter = max(16, max_counter_samples // max(1, len(counters)))
    out = {}
    for part, chosen in (("device", [p for p in pids if device(p)]), ("host", [p for p in pids if not device(p)])):
        if chosen:
            out[part] = _part_model(part, chosen, pnames, tnames, tsort, tracks, counters, budgets, per_counter)
            out[part]["stats"]["max_slices"] = max_slices
    return out


def _part_model(part: str, pids: list, pnames: dict, tnames: dict, tsort: dict, tracks: dict, counters: dict,
                budgets: dict, per_counter: int) -> dict:
    keys_of = {pid: sorted((k for k in tracks if k[0] == pid), key=lambda k: (tsort.get(k, 0), str(k[1])))
               for pid in pids}
    starts = [s[0] for pid in pids for k in keys_of[pid] for s in tracks[k]]
    starts += [c[0] for k, cs in counters.items() if k[0] in pids for c in cs]
    origin = min(starts, default=0.0)
    names, details = _Strings(), _Strings()
    groups, rows = [], []
    aggregated = dropped = source = 0
    for gi, pid in enumerate(pids):
        groups.append({"name": pnames.get(pid, str(pid)), "kind": part})
        group_rows = []
        for key in keys_of[pid]:
            slices = tracks[key]
            source += len(slices)
            slices.sort(key=lambda s: (s[0], -s[1]))
            if budgets[key] < len(slices):
                aggregated += len(slices)
                slices = _aggregate(slices, budgets[key])
            lanes, deep = _lanes(slices, origin, names, details)
            dropped += deep
            instructions = any(isinstance(s[4], dict) and "opcode" in s[4] for s in slices[:64])
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
    ends = [s[1] for pid in pids for k in keys_of[pid] for s in tracks[k]]
    span = max(1, round((max(ends, default=origin) - origin) * 1000))
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
