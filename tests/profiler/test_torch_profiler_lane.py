"""A user's own torch.profiler with ProfilerActivity.PrivateUse1 gets the simulated device lane."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

import neuronsim

neuronsim.enable()


def test_export_chrome_trace_carries_the_device_ops(tmp_path):
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = torch.tanh(x @ x)
        torch.neuron.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    # (the device lane's validity is tests/profiler/test_lane.py's; torch's own events vary by run)
    lane = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert {"aten::mm", "aten::tanh"} <= {e["name"] for e in lane}, sorted({e["name"] for e in lane})
    host = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    assert host and y.device.type == "neuron"
