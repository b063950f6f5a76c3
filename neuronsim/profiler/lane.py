"""The device lane in torch.profiler traces.

torch.profiler on a pure-Python PrivateUse1 device records host ops only; a device lane needs a
Kineto plugin in C++. Instead the chrome trace it exports is post-processed: its ``ts`` are
``(time.time_ns() - baseTimeNanoseconds) / 1000`` (reference/pytorch-device §6), so device ops that
know the host time they were issued at (``DeviceOpEvent.wall_ns``) line up with the host op that
issued them. :func:`add_device_lane` merges them in as a ``neuron:<i>`` process whose slices carry
``args.device`` and ``args.stream`` — what Holistic Trace Analysis reads as device kernels.

:func:`install_export_hook` makes ``torch.profiler.profile.export_chrome_trace`` (and so
``on_trace_ready`` handlers) do this whenever ``ProfilerActivity.PrivateUse1`` is among the
profiler's activities. The device calls it once, with a function returning its op events.
torch is imported only inside those functions.

``neuronsim profile`` does not need torch.profiler for its host lane: :func:`draw_host_ops` draws
one host slice per device op from the times the device recorded when the host issued each op
(its chokepoint stamps every op; no per-op profiler callbacks, so the script runs at full speed).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from neuronsim.profiler.events import DeviceOpEvent
from neuronsim.profiler.trace import TraceBuilder, TraceStats, draw_device

HOST_TID = 1
HOST_TRACK = "Host: time to issue each device op"
HOST_CATEGORY = "host_op"


def draw_host_ops(b: TraceBuilder, devices: Mapping[int, Sequence[DeviceOpEvent]], since_ns: int,
                  origin_ns: int, pid: int | None = None) -> int:
    """Draw the host's side of the device ops into ``b``, at ns after ``origin_ns`` (a host
    ``time.time_ns()``: the trace's time 0, as for :func:`~neuronsim.profiler.trace.draw_device`);
    returns how many host slices were drawn.

    The device stamps each op with the host time at which the host finished issuing it
    (``wall_ns``: after a native kernel's computation, after a fallback's ATen call), so host
    slice *i* spans from op *i-1*'s stamp (the first from ``since_ns``, when recording started) to
    op *i*'s: the host time spent getting to that op — the script's Python, autograd and the op's
    own host work. The slices tile the host timeline without overlapping; long ones point at
    host-bound stretches. Past ``b.stats.max_op_events`` slices, runs of ops are aggregated.
    Ops of every device are on the one host track, in issue order.
    """
    pid = os.getpid() if pid is None else pid
    # wall times are ~1.8e18 ns: subtract the origin in integers before going to floats
    issued = sorted((float(e.wall_ns - origin_ns), device, e.name) for device, events in devices.items()
                    for e in events if e.wall_ns is not None)
    if not issued:
        return 0
    b.process(pid, f"host (pid {pid})", sort_index=-1000)
    b.thread(pid, HOST_TID, HOST_TRACK)
    limit = b.stats.max_op_events
    prev = float(since_ns - origin_ns)
    several = len(devices) > 1  # name the device only when there is a choice (trace size)
    for wall, device, name in issued[:limit]:
        args = {"device": device} if several else None
        b.slice(pid, HOST_TID, name, min(prev, wall), wall, HOST_CATEGORY, args)
        prev = wall
    rest = issued[limit:]
    if rest:
        for chunk in np.array_split(np.arange(len(rest)), min(max(1, limit // 10), len(rest))):
            first, last = int(chunk[0]), int(chunk[-1])
            b.slice(pid, HOST_TID, f"{chunk.size} device ops (aggregated)", prev, rest[last][0],
                    HOST_CATEGORY, {"aggregated_ops": int(chunk.size), "first": rest[first][2]})
            prev = rest[last][0]
    return min(limit, len(issued))


def add_device_lane(chrome_trace_json: dict | str | os.PathLike, device_events: Sequence[DeviceOpEvent],
                    base_time_ns: int | float, *, chip_name: str = "trn2", device: int = 0,
                    detail: str = "op", max_instruction_events: int | None = None) -> dict:
    """Return the torch.profiler trace with the device's ops added as a device lane.

    ``chrome_trace_json`` is the exported trace (a dict or a path). An op with ``wall_ns`` starts
    at that host time, or when the device finishes the previous op if later; one without starts
    at ``base_time_ns + start_ns`` (``base_time_ns``: the host ``time.time_ns()`` at which the
    device clock read 0). Durations are the simulated ones.
    """
    if not isinstance(chrome_trace_json, dict):
        with open(chrome_trace_json) as f:
            chrome_trace_json = json.load(f)
    trace = dict(chrome_trace_json)
    events = list(trace.get("traceEvents", []))
    origin = trace.get("baseTimeNanoseconds", 0)
    used = {e.get("pid") for e in events if isinstance(e, dict)}
    pid = device
    while pid in used:
        pid += 1000
    stats = TraceStats() if max_instruction_events is None else TraceStats(max_instruction_events)
    b = TraceBuilder(stats=stats)
    draw_device(b, list(device_events), chip_name=chip_name, device=device, pid=pid, detail=detail,
                base_time_ns=base_time_ns, origin_ns=origin, hta=True)
    trace["traceEvents"] = events + _names_for_unnamed(events) + b.events
    trace.setdefault("displayTimeUnit", "ms")
    lanes = dict(trace.get("neuronsim", {}))
    lanes[f"neuron:{device}"] = {"pid": pid, **stats.as_dict()}
    trace["neuronsim"] = lanes
    return trace


def _names_for_unnamed(events: list) -> list[dict]:
    """Metadata for tracks torch.profiler leaves unnamed (its ``Spans`` process), so every pid and
    tid in the merged trace is named."""
    named_pids, named_tracks, pids, tracks = set(), set(), {}, {}
    for e in events:
        if not isinstance(e, dict) or "pid" not in e:
            continue
        ph, pid = e.get("ph"), e["pid"]
        if ph == "M":
            if e.get("name") == "process_name":
                named_pids.add(pid)
            elif e.get("name") == "thread_name":
                named_tracks.add((pid, e.get("tid")))
        elif ph in ("X", "B", "E", "C") or (ph in ("i", "I") and e.get("s", "t") != "g"):
            pids.setdefault(pid, None)
            if ph != "C" and (ph != "i" or e.get("s", "t") == "t"):
                tracks.setdefault((pid, e.get("tid")), None)
    out = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": str(p)}}
           for p in pids if p not in named_pids]
    out += [{"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": str(t)}}
            for p, t in tracks if (p, t) not in named_tracks]
    return out


def install_export_hook(device_events: Callable[[], Sequence[DeviceOpEvent]],
                        chip_name: Callable[[], str] = lambda: "trn2", device: int = 0) -> None:
    """Make ``torch.profiler.profile`` add the device lane to what ``export_chrome_trace`` writes.

    ``device_events()`` returns the device's recorded ops; those issued (``wall_ns``) while the
    profiler was recording are added. Only profilers with ``ProfilerActivity.PrivateUse1`` among
    their activities are changed. Calling it again replaces the source; it patches once.
    """
    import torch.profiler as tp

    _SOURCES[device] = (device_events, chip_name)
    cls = tp.profile
    if getattr(cls, "_neuronsim_lane_installed", False):
        return
    original_start, original_stop, original_export = cls.start, cls.stop, cls.export_chrome_trace

    def start(self):
        self._neuronsim_window = [time.time_ns(), None]
        return original_start(self)

    def stop(self):
        result = original_stop(self)
        window = getattr(self, "_neuronsim_window", None)
        if window is not None:
            window[1] = time.time_ns()
        return result

    def export_chrome_trace(self, path):
        result = original_export(self, path)
        if tp.ProfilerActivity.PrivateUse1 in set(getattr(self, "activities", ()) or ()):
            _add_lanes_to_file(path, getattr(self, "_neuronsim_window", None))
        return result

    cls.start, cls.stop, cls.export_chrome_trace = start, stop, export_chrome_trace
    cls._neuronsim_lane_installed = True


_SOURCES: dict[int, tuple[Callable, Callable]] = {}


def _add_lanes_to_file(path: str, window: list | None) -> None:
    if str(path).endswith(".gz"):
        return  # compressed exports keep host ops only
    lo, hi = (window[0], window[1] or time.time_ns()) if window else (0, time.time_ns())
    with open(path) as f:
        trace = json.load(f)
    for device, (source, chip_name) in sorted(_SOURCES.items()):
        events = [e for e in source() if e.wall_ns is not None and lo <= e.wall_ns <= hi]
        if events:
            trace = add_device_lane(trace, events, lo, chip_name=chip_name(), device=device)
    with open(path, "w") as f:
        json.dump(trace, f)


_TRACE_EVENTS = re.compile(r'"traceEvents"\s*:\s*\[')
_BASE_TIME = re.compile(r'"baseTimeNanoseconds"\s*:\s*(\d+)')
_STRING_TRACK = re.compile(r'"pid"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"tid"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
_SLICE = re.compile(r'"ph"\s*:\s*"X"')
_NUMERIC_PID = re.compile(r'"pid"\s*:\s*(-?\d+)')


def trace_base_ns(text: str) -> int:
    """``baseTimeNanoseconds`` of a torch.profiler export (0 when absent)."""
    m = _BASE_TIME.search(text)
    return int(m.group(1)) if m else 0


def count_slices(text: str) -> int:
    return len(_SLICE.findall(text))


def merge_trace_text(host_text: str, device_trace: dict) -> str:
    """Insert ``device_trace``'s events (built in the host's time base) into a torch.profiler
    export's JSON text, without parsing and re-serializing the host events (most of the file).

    torch leaves the tracks of its ``Spans`` process (string pids) unnamed: they get names here,
    so every pid and tid of the result is named. A device process whose pid the host trace already
    uses (with ``ProfilerActivity.PrivateUse1`` torch names pids 0-15 "python", labelled "GPU i")
    moves to a free pid, +1000 at a time, as :func:`add_device_lane` does: one name per pid. The
    device trace's ``otherData.neuronsim`` goes to the top-level ``neuronsim`` key.
    """
    m = _TRACE_EVENTS.search(host_text)
    if m is None:
        raise ValueError("not a chrome trace: no traceEvents list")
    named = []
    for pid, tid in sorted(set(_STRING_TRACK.findall(host_text))):
        named.append({"ph": "M", "name": "process_name", "pid": json.loads(pid), "tid": 0,
                      "args": {"name": json.loads(pid)}})
        named.append({"ph": "M", "name": "thread_name", "pid": json.loads(pid), "tid": json.loads(tid),
                      "args": {"name": str(json.loads(tid))}})
    used = {int(p) for p in _NUMERIC_PID.findall(host_text)}
    moved: dict = {}
    for e in device_trace["traceEvents"]:
        pid = e.get("pid")
        if isinstance(pid, int) and pid in used and pid not in moved:
            free = pid
            while free in used or free in moved.values():
                free += 1000
            moved[pid] = free
    device_events = [{**e, "pid": moved[e["pid"]]} if e.get("pid") in moved else e
                     for e in device_trace["traceEvents"]]
    events = named + device_events
    head, rest = host_text[: m.end()], host_text[m.end():]
    inserted = ",".join(json.dumps(e, separators=(",", ":")) for e in events)
    if inserted and rest.lstrip()[:1] != "]":
        inserted += ","
    stats = json.dumps(device_trace.get("otherData", {}).get("neuronsim", {}), separators=(",", ":"))
    brace = head.index("{") + 1
    return head[:brace] + f'"neuronsim":{stats},' + head[brace:] + inserted + rest
