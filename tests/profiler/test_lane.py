"""The device lane merged into a torch.profiler chrome trace (host ops on CPU, synthetic device ops)."""

import json
import time

import pytest

from neuronsim.profiler.events import DeviceOpEvent
from neuronsim.profiler.lane import add_device_lane, install_export_hook, merge_trace_text
from neuronsim.profiler.validate import check_trace

torch = pytest.importorskip("torch")


def _host_trace(tmp_path, steps=6):
    """A CPU torch.profiler trace and, per host op issued, a synthetic device op at that time."""
    from torch.profiler import ProfilerActivity, profile

    issued = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.randn(32, 32)
        for _i in range(steps):
            issued.append(time.time_ns())
            x = torch.mm(x, x) / 32
    path = tmp_path / "host.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text()), issued


def _device_events(issued):
    events, now = [], 0.0
    for i, wall in enumerate(issued):
        native = i % 3 != 2
        duration = 1500.0 + 250.0 * i
        events.append(DeviceOpEvent("aten::mm" if native else "aten::div.Tensor", now, duration, native,
                                    launch_ns=200.0 if native else 0.0, wall_ns=wall))
        now += duration
    return events


def test_lane_aligns_with_host_ops_and_validates(tmp_path):
    host, issued = _host_trace(tmp_path)
    events = _device_events(issued)
    merged = add_device_lane(host, events, base_time_ns=issued[0])
    check_trace(merged, allow_foreign_phases=True)
    base = host["baseTimeNanoseconds"]
    lane = [e for e in merged["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert len(lane) == len(events)
    for e, dev in zip(lane, events, strict=False):
        assert e["ts"] >= (dev.wall_ns - base) / 1000 - 1e-3  # never before the host issued it
        assert e["dur"] == pytest.approx(dev.duration_ns / 1000, abs=1e-3)
        assert e["args"]["stream"] in (1, 2) and e["args"]["device"] == 0
    host_ops = [e for e in host["traceEvents"] if e.get("ph") == "X"]
    first_host = min(e["ts"] for e in host_ops)
    last_host = max(e["ts"] + e["dur"] for e in host_ops)
    assert first_host <= lane[0]["ts"] <= last_host  # inside the host window: aligned, not offset


def test_hta_temporal_breakdown_counts_the_simulated_device_time_as_busy(tmp_path, monkeypatch):
    hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # our durations have ns resolution
    host, issued = _host_trace(tmp_path)
    events = _device_events(issued)
    merged = add_device_lane(host, events, base_time_ns=issued[0])
    trace_dir = tmp_path / "hta"
    trace_dir.mkdir()
    (trace_dir / "rank0.json").write_text(json.dumps(merged))
    breakdown = hta.TraceAnalysis(trace_dir=str(trace_dir)).get_temporal_breakdown(visualize=False)
    busy_us = breakdown["compute_time(us)"][0] + breakdown["non_compute_time(us)"][0]
    assert busy_us == pytest.approx(sum(e.duration_ns for e in events) / 1000, rel=1e-6)
    assert breakdown["kernel_time(us)"][0] >= busy_us


def test_export_hook_adds_the_lane_only_for_privateuse1(tmp_path, monkeypatch):
    from torch.profiler import ProfilerActivity, profile

    from neuronsim.profiler import lane

    monkeypatch.setattr(lane, "_SOURCES", dict(lane._SOURCES))  # the device's own source comes back after

    recorded: list[DeviceOpEvent] = []
    install_export_hook(lambda: recorded)
    for activities, expect_lane in (([ProfilerActivity.CPU], False),
                                    ([ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], True)):
        recorded.clear()
        with profile(activities=activities) as prof:
            x = torch.ones(4)
            recorded.append(DeviceOpEvent("aten::add.Tensor", 0.0, 2000.0, True, wall_ns=time.time_ns()))
            x = x + 1
        path = tmp_path / f"t{int(expect_lane)}.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
        lane = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
        assert bool(lane) == expect_lane
        if expect_lane:  # a CPU-only export is torch's own file, left as torch wrote it
            check_trace(trace, allow_foreign_phases=True)


def _issued_ops(n, t0=1_796_000_000_000_000_000, gap=3_000):
    """Device ops issued every ``gap`` ns of host time from ``t0`` (wall-clock magnitudes)."""
    return [DeviceOpEvent("aten::mm" if i % 2 else "aten::add.Tensor", 1000.0 * i, 800.0, True,
                          wall_ns=t0 + gap * (i + 1)) for i in range(n)]


def test_host_track_tiles_the_time_to_each_device_op():
    from neuronsim.profiler.lane import HOST_CATEGORY, draw_host_ops
    from neuronsim.profiler.trace import TraceBuilder, draw_device

    t0 = 1_796_000_000_000_000_000
    events = _issued_ops(7, t0)
    events.insert(3, DeviceOpEvent("aten::sort", 3500.0, 100.0, False))  # no issue time: no host slice
    b = TraceBuilder()
    assert draw_host_ops(b, {0: events}, since_ns=t0, origin_ns=t0, pid=77) == 7
    draw_device(b, events, chip_name="trn2", base_time_ns=t0, origin_ns=t0, hta=True)
    trace = b.build()
    check_trace(trace)
    host = [e for e in trace["traceEvents"] if e.get("cat") == HOST_CATEGORY]
    assert [e["name"] for e in host] == [e.name for e in events if e.wall_ns is not None]
    assert all(e["pid"] == 77 and "args" not in e for e in host)
    assert host[0]["ts"] == 0.0  # from when recording started ...
    for i, e in enumerate(host):  # ... each to its op's issue stamp, at ns resolution
        assert e["ts"] + e["dur"] == pytest.approx(3.0 * (i + 1), abs=1e-9)
    device = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    issued = [d for d in device if "host fallback" not in d["name"]]
    for h, d in zip(host, issued, strict=True):
        assert d["ts"] >= h["ts"] + h["dur"] - 1e-9  # the device starts an op once it is issued


def test_host_track_is_capped_and_names_devices_when_several():
    from neuronsim.profiler.lane import HOST_CATEGORY, draw_host_ops
    from neuronsim.profiler.trace import TraceBuilder, TraceStats

    t0 = 1_796_000_000_000_000_000
    b = TraceBuilder(stats=TraceStats(max_op_events=100))
    devices = {0: _issued_ops(150, t0, gap=2_000), 1: _issued_ops(150, t0 + 1_000, gap=2_000)}
    assert draw_host_ops(b, devices, since_ns=t0, origin_ns=t0) == 100
    trace = b.build()
    check_trace(trace)
    host = [e for e in trace["traceEvents"] if e.get("cat") == HOST_CATEGORY]
    drawn, aggregated = host[:100], host[100:]
    assert [e["args"]["device"] for e in drawn[:4]] == [0, 1, 0, 1]  # interleaved in issue order
    assert aggregated and sum(e["args"]["aggregated_ops"] for e in aggregated) == 200
    assert aggregated[-1]["ts"] + aggregated[-1]["dur"] == pytest.approx(301.0, abs=1e-9)


def test_merged_device_processes_move_off_the_pids_torch_names_for_gpu_lanes():
    """With ProfilerActivity.PrivateUse1 torch.profiler names pids 0-15 "python" ("GPU i"): the
    device lane must not share a pid (and so a name) with them."""
    host = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "process_name", "pid": 77, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 77, "tid": 77, "args": {"name": "thread 77"}},
        {"ph": "X", "name": "aten::mm", "pid": 77, "tid": 77, "ts": 1.0, "dur": 2.0, "cat": "cpu_op"}],
        "displayTimeUnit": "ms"}
    device = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "neuron:0 NeuronCore"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "Device ops"}},
        {"ph": "X", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 3.0, "dur": 1.0, "cat": "kernel"}]}
    merged = json.loads(merge_trace_text(json.dumps(host), device))
    check_trace(merged)
    names: dict = {}
    for e in merged["traceEvents"]:
        if e.get("name") == "process_name":
            names.setdefault(e["pid"], set()).add(e["args"]["name"])
    assert names == {0: {"python"}, 77: {"python"}, 1000: {"neuron:0 NeuronCore"}}
    device_slices = [e for e in merged["traceEvents"] if e.get("cat") == "kernel"]
    assert [e["pid"] for e in device_slices] == [1000]
