"""The device lane merged into a torch.profiler chrome trace (host ops on CPU, synthetic device ops)."""

import json
import time

import pytest

from neuronsim.profiler.events import DeviceOpEvent
from neuronsim.profiler.lane import add_device_lane, install_export_hook
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


def test_export_hook_adds_the_lane_only_for_privateuse1(tmp_path):
    from torch.profiler import ProfilerActivity, profile

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
