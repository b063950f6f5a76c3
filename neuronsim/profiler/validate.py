"""A validator for Chrome Trace Event Format files, with the rules neuronsim's traces keep.

- The file is an object with a ``traceEvents`` list and a ``displayTimeUnit`` of ``ms`` or ``ns``.
- Every event has a known phase (``X B E C M i``, plus ``I s t f`` flow/legacy phases in foreign
  traces when allowed) and the fields that phase needs, with finite numbers; ``dur >= 0``.
- Metadata names every process and every track: each pid used has a ``process_name``, each
  (pid, tid) with slices or thread-scoped instants a ``thread_name``. (Global instants, ``s: g``,
  belong to no track.)
- On any track, slices nest or are disjoint; B/E pairs balance. On a device track (a process whose
  name starts with ``neuron:``, or a pid in ``strict_pids``) no two slices overlap at all.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

PHASES = frozenset("XBECMi")
FOREIGN_PHASES = frozenset("Istf")  # torch.profiler writes flow events (s/f) in GPU traces
METADATA_NAMES = frozenset({"process_name", "process_labels", "process_sort_index", "thread_name",
                            "thread_sort_index"})
DEVICE_PROCESS_PREFIX = "neuron:"
TOLERANCE_US = 1e-6  # ts/dur are rounded to the nanosecond; sums may differ by a float ulp ...
ULPS = 2.0**-51  # ... which at wall-clock magnitudes (~5e12 us, torch traces) is ~1 ns: allow 2 ulps


class TraceValidationError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} trace problem(s):\n  {shown}{more}")


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_event(i: int, e, allow_foreign: bool, problems: list[str]) -> bool:
    where = f"event {i}"
    if not isinstance(e, dict):
        problems.append(f"{where}: not an object")
        return False
    ph = e.get("ph")
    allowed = PHASES | FOREIGN_PHASES if allow_foreign else PHASES
    if ph not in allowed:
        problems.append(f"{where}: unknown phase {ph!r}")
        return False
    where = f"event {i} ({ph} {e.get('name')!r})"
    if "pid" not in e:
        problems.append(f"{where}: no pid")
    if ph != "E" and not isinstance(e.get("name"), str):
        problems.append(f"{where}: no name")
    if ph == "M":
        if e.get("name") not in METADATA_NAMES:
            problems.append(f"{where}: unknown metadata name")
        if not isinstance(e.get("args"), dict):
            problems.append(f"{where}: metadata without args")
        elif e["name"] in ("process_name", "thread_name") and not isinstance(e["args"].get("name"), str):
            problems.append(f"{where}: {e['name']} without args.name")
        if e.get("name", "").startswith("thread") and "tid" not in e:
            problems.append(f"{where}: thread metadata without tid")
        return True
    if not _finite(e.get("ts")):
        problems.append(f"{where}: ts missing or not a finite number")
        return False
    if ph in "XBE" and "tid" not in e:
        problems.append(f"{where}: no tid")
    if ph == "X" and not (_finite(e.get("dur")) and e["dur"] >= 0):
        problems.append(f"{where}: dur missing, negative or not finite")
        return False
    if ph == "C":
        args = e.get("args")
        if not isinstance(args, dict) or not args or not all(_finite(v) for v in args.values()):
            problems.append(f"{where}: a counter needs args of finite numbers")
    if ph in "iI" and e.get("s", "t") not in ("g", "p", "t"):
        problems.append(f"{where}: instant scope must be g, p or t")
    return True


def validate_trace(trace, *, allow_foreign_phases: bool = False, strict_pids: Iterable = ()) -> list[str]:
    """Every problem found (empty when the trace is valid)."""
    problems: list[str] = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the trace is not an object with a traceEvents list"]
    if trace.get("displayTimeUnit") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit is {trace.get('displayTimeUnit')!r}, not 'ms' or 'ns'")
    process_names: dict = {}
    thread_names: set = set()
    used_pids: set = set()
    used_tracks: set = set()
    slices: dict = defaultdict(list)
    open_b: dict = defaultdict(list)
    for i, e in enumerate(trace["traceEvents"]):
        if not _check_event(i, e, allow_foreign_phases, problems):
            continue
        ph, pid = e["ph"], e.get("pid")
        if ph == "M":
            if e["name"] == "process_name":
                process_names[pid] = e["args"].get("name", "")
            elif e["name"] == "thread_name":
                thread_names.add((pid, e.get("tid")))
            continue
        if ph in "iI" and e.get("s", "t") == "g":
            continue
        if ph in "stf":
            continue
        used_pids.add(pid)
        if ph in "XBE" or (ph in "iI" and e.get("s", "t") == "t"):
            used_tracks.add((pid, e.get("tid")))
        if ph == "X":
            slices[(pid, e.get("tid"))].append((e["ts"], e["ts"] + e["dur"], i))
        elif ph == "B":
            open_b[(pid, e.get("tid"))].append(e["ts"])
        elif ph == "E":
            stack = open_b[(pid, e.get("tid"))]
            if not stack:
                problems.append(f"event {i}: E without a matching B on pid {pid} tid {e.get('tid')}")
            else:
                start = stack.pop()
                slices[(pid, e.get("tid"))].append((start, e["ts"], i))
    for key, stack in open_b.items():
        if stack:
            problems.append(f"pid {key[0]} tid {key[1]}: {len(stack)} B event(s) without E")
    for pid in sorted(used_pids - set(process_names), key=str):
        problems.append(f"pid {pid!r} has events but no process_name metadata")
    for pid, tid in sorted(used_tracks - thread_names, key=str):
        problems.append(f"pid {pid!r} tid {tid!r} has events but no thread_name metadata")
    device_pids = {p for p, n in process_names.items() if str(n).startswith(DEVICE_PROCESS_PREFIX)}
    strict = set(strict_pids) | device_pids
    for (pid, tid), spans in slices.items():
        problems += _check_track(pid, tid, spans, pid in strict, process_names, trace["traceEvents"])
    return problems


def _check_track(pid, tid, spans, strict: bool, names: dict, events: list) -> list[str]:
    """Strict tracks: no overlaps. Others: slices nest or are disjoint."""
    out: list[str] = []
    spans.sort(key=lambda s: (s[0], -s[1]))
    stack: list[tuple] = []
    for start, end, i in spans:
        tol = max(TOLERANCE_US, abs(start) * ULPS)
        while stack and stack[-1][1] <= start + tol:
            stack.pop()
        if stack:
            outer = stack[-1]
            what = f"{names.get(pid, pid)!s} / tid {tid}"
            if strict:
                out.append(f"{what}: slice {events[i].get('name')!r} [{start}, {end}] overlaps "
                           f"{events[outer[2]].get('name')!r} [{outer[0]}, {outer[1]}]")
            elif end > outer[1] + tol:
                out.append(f"{what}: slice {events[i].get('name')!r} [{start}, {end}] partly overlaps "
                           f"{events[outer[2]].get('name')!r} [{outer[0]}, {outer[1]}]")
        stack.append((start, end, i))
        if len(out) > 20:
            break
    return out


def check_trace(trace, **kw) -> None:
    """Raise :class:`TraceValidationError` listing every problem, if any."""
    problems = validate_trace(trace, **kw)
    if problems:
        raise TraceValidationError(problems)
