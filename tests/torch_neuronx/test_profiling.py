"""``torch_neuronx.profiling``: torch.profiler with NeuronConfig writes the profile ``neuronsim profile``
writes (trace.json, summary.json, ops.csv) under TorchNeuron's directory layout."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from nki_test_kernels import add_kernel
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode, parse_cores

from neuronsim.profiler import report


def _profile(tmp_path, modes):
    cfg = NeuronConfig(modes=modes, profile_output_dir=str(tmp_path), capture_enabled_for_nc="0")
    exporter = NeuronProfiler(cfg)
    a = torch.rand(128, 512, device="neuron")
    (a * 2).cpu()  # before the window: not in the profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 on_trace_ready=exporter.export_trace):
        b = torch.relu(a) + 1
        c = add_kernel[1, 1](a, b)
        torch.neuron.synchronize()
    (c * 3).cpu()  # after the window: not in it either
    (out,) = exporter.written
    return out


@pytest.mark.parametrize("modes", [[ProfileMode.RUNTIME], [ProfileMode.DEVICE, ProfileMode.RUNTIME]],
                         ids=["runtime", "device"])
def test_profiler_writes_a_neuronsim_profile_of_the_window(tmp_path, modes):
    out = _profile(tmp_path, modes)
    assert out.parent.parent == tmp_path and "_pid_" in out.parent.name  # <dir>/<host>_pid_<pid>/<time>/
    assert report.load_summary(out) == json.loads((out / report.SUMMARY_FILE).read_text())
    with open(out / report.OPS_FILE) as f:
        ops = [row["name"] for row in csv.DictReader(f)]
    assert "nki:add_kernel" in ops and any("relu" in op for op in ops)
    assert not any(op.startswith("aten::mul") for op in ops)  # only what ran inside the window
    trace = json.loads((out / report.TRACE_FILE).read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "nki:add_kernel" in names  # the device lane
    assert any(isinstance(n, str) and n.startswith("aten::") for n in names)  # torch.profiler's host ops
    categories = {e.get("cat") for e in trace["traceEvents"]}
    engine_tracks = bool(categories & {"tensor", "vector", "scalar", "gpsimd", "dma"})
    assert engine_tracks == (ProfileMode.DEVICE in modes)  # DEVICE: every engine instruction drawn


def test_config_validation():
    assert parse_cores("0, 2-3") == {0, 2, 3} and parse_cores(None) is None
    with pytest.raises(ValueError, match="capture_enabled_for_nc"):
        NeuronConfig(capture_enabled_for_nc="a-b")
    with pytest.raises(TypeError, match="ProfileMode"):
        NeuronConfig(modes=["device"])
