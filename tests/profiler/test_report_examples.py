"""The reports of the examples, as a user makes them, in headless Chromium: examples/nki/matmul.py
(a file of NKI kernels) and examples/train_gpt.py on trn2 and trn3, compared.

They show labelled engine rows, a time axis with units, and zoom; the comparison prints and renders
the deltas, its two timelines zooming together. Screenshots are written to the tests' tmp_path.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import Browser, browser_or_skip
from report_checks import check_renders, check_zoom, state, visible_rect

from neuronsim.profiler.trace import load_trace
from neuronsim.profiler.validate import check_trace

REPO = Path(__file__).resolve().parents[2]
NEURON_PROFILER_SCRIPT = """
import sys
import torch
import torch_neuronx
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
x = torch.randn(64, 64, device="neuron")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace):
    for _ in range(3):
        x = torch.tanh(x @ x)
    torch.neuron.synchronize()
print(exporter.written[0])
"""
MOST_LANES = "Math.max(...neuronsimReport.timelines[1].rows.map(r => r.lanes ? r.lanes.length : 0))"
DEVICE_SCRIPT = """
import torch
x = torch.randn(32, 32).to("neuron")
for _ in range(3):
    x = torch.tanh(x @ x)
print("sum", float(x.sum().cpu()))
"""
ENGINE_ROWS = {"TensorE (LoadStationary)", "TensorMatrix (MultiplyMoving)", "VectorE", "DMA q0"}


def neuronsim(*args):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NEURON_SIM") or k == "NEURON_SIM_CACHE_DIR"}
    return subprocess.run([sys.executable, "-m", "neuronsim.cli.main", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def browser():
    with Browser(browser_or_skip()) as b:
        yield b


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    browser_or_skip()  # no profiling work when the browser tests cannot run
    out = tmp_path_factory.mktemp("examples")
    matmul = neuronsim("profile", "--detail", "instruction", "--html", "-o", out / "matmul",
                       REPO / "examples" / "nki" / "matmul.py")
    assert matmul.returncode == 0, matmul.stderr
    gpt = neuronsim("profile", "--chip", "trn2,trn3", "--detail", "instruction", "--html", "-o", out / "gpt",
                    REPO / "examples" / "train_gpt.py", "--steps", "1")
    assert gpt.returncode == 0, gpt.stderr
    return out, matmul, gpt


def test_matmul_kernels_report(browser, profiles, tmp_path):
    out, result, _ = profiles
    doc = json.loads((out / "matmul" / "summary.json").read_text())
    assert doc["kernels"] == ["matmul_naive", "matmul_blocked"] and doc["chip"] == "trn2"
    assert any("on trn3 left out" in n for n in doc["notes"])  # the example also simulates on trn3
    trace = load_trace(out / "matmul" / "trace.json")
    check_trace(trace)
    browser.open(out / "matmul" / "report.html")
    browser.frame()
    s = check_renders(browser, trace)
    assert ENGINE_ROWS <= set(s["rows"]) and s["unit"] == "µs"
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    browser.frame()
    browser.screenshot(tmp_path / "matmul.png", full_page=False)
    check_zoom(browser)
    browser.screenshot(tmp_path / "matmul-zoomed.png", full_page=False)
    assert browser.console_errors == []


def test_train_gpt_report_on_trn2(browser, profiles, tmp_path):
    out, _, _ = profiles
    trace = load_trace(out / "gpt" / "trn2" / "trace.json")
    check_trace(trace, allow_foreign_phases=True)
    browser.open(out / "gpt" / "trn2" / "report.html")
    browser.frame()
    s = check_renders(browser, trace)
    assert ENGINE_ROWS | {"Device ops", "ScalarE"} <= set(s["rows"])
    check_renders(browser, trace, timeline=1, part="host")
    doc = json.loads((out / "gpt" / "trn2" / "summary.json").read_text())
    assert s["end"] - s["start"] == pytest.approx(doc["total_time"] * 1e9, rel=1e-3)
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    browser.frame()
    browser.screenshot(tmp_path / "train_gpt-trn2.png", full_page=False)
    check_zoom(browser)
    assert browser.console_errors == []


def test_train_gpt_trn2_vs_trn3_prints_and_renders_the_deltas(browser, profiles, tmp_path):
    out, _, result = profiles
    assert "neuronsim compare — trn2 vs trn3" in result.stdout and "Engine active time" in result.stdout
    comparison = json.loads((out / "gpt" / "compare.json").read_text())
    total = comparison["summary"][0]
    assert total["field"] == "total_time" and total["a"] > 0 and total["b"] > 0
    assert f"{100 * (total['b'] - total['a']) / total['a']:+.1f}%" in result.stdout
    assert {"aten::mm", "aten::addmm"} <= {r["name"] for r in comparison["ops"]}
    browser.open(out / "gpt" / "report.html")
    browser.frame()
    assert browser.console_errors == [] and browser.requests == []
    assert browser.eval("neuronsimReport.timelines.length") == 2
    rows = browser.eval("document.querySelectorAll('table.compare-ops tbody tr').length")
    assert rows == len(comparison["ops"])
    browser.screenshot(tmp_path / "train_gpt-compare.png")
    # the two timelines zoom together, each from its first device op
    a0, b0 = state(browser, 0), state(browser, 1)
    x, y, w, h = visible_rect(browser, "#tla-device .tl-canvas")
    browser.wheel(x + w / 2, y + 40, -300, ctrl=True)
    a1, b1 = state(browser, 0), state(browser, 1)
    assert a1["end"] - a1["start"] < a0["end"] - a0["start"]
    assert b1["end"] - b1["start"] == pytest.approx(a1["end"] - a1["start"])
    assert b0 != b1
    assert browser.console_errors == []


def test_torch_profiler_host_ops_open_in_the_same_report(browser, tmp_path):
    """The format torch_neuronx.profiling's NeuronProfiler writes: torch.profiler's host ops (nested,
    on their threads) with the device ops merged in."""
    script = tmp_path / "device.py"
    script.write_text(DEVICE_SCRIPT)
    result = neuronsim("profile", "--torch-profiler", "--detail", "instruction", "--html",
                       "-o", tmp_path / "p", script)
    assert result.returncode == 0, result.stderr
    trace = load_trace(tmp_path / "p" / "trace.json")
    check_trace(trace, allow_foreign_phases=True)
    browser.open(tmp_path / "p" / "report.html")
    browser.frame()
    device = check_renders(browser, trace)
    assert {"Device ops", "TensorE (LoadStationary)", "VectorE"} <= set(device["rows"])
    host = check_renders(browser, trace, timeline=1, part="host")
    lanes = browser.eval(MOST_LANES)
    assert host["rows"] and lanes > 1  # torch.profiler's ops nest: drawn in lanes
    check_zoom(browser, timeline=1)
    browser.screenshot(tmp_path / "torch-profiler.png")
    assert browser.console_errors == []


def test_torch_neuronx_profiler_output_opens_in_the_report(browser, tmp_path):
    """A TorchNeuron script's torch_neuronx.profiling.NeuronProfiler directory, opened by
    `neuronsim view --html`: its device engines on the simulated clock, torch.profiler's host ops apart."""
    script = tmp_path / "tn.py"
    script.write_text(NEURON_PROFILER_SCRIPT)
    result = neuronsim("run", script, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    out = Path(result.stdout.strip().splitlines()[-1])
    assert out.is_relative_to(tmp_path / "out") and "_pid_" in out.parent.name
    view = neuronsim("view", out, "--html")
    assert view.returncode == 0, view.stderr
    trace = load_trace(out / "trace.json")
    browser.open(out / "report.html")
    browser.frame()
    device = check_renders(browser, trace)
    assert {"Device ops", "TensorE (LoadStationary)", "VectorE", "ScalarE"} <= set(device["rows"])
    check_renders(browser, trace, timeline=1, part="host")
    check_zoom(browser)
    browser.screenshot(tmp_path / "torch_neuronx.png")
    assert browser.console_errors == []
