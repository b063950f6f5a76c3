"""``neuronsim profile`` and ``neuronsim view`` end to end: files written, traces valid, summary sane."""

import csv
import json
import textwrap

import pytest
from cli_helpers import REPO, neuronsim

from neuronsim.profiler.validate import check_trace

NKI_COPY = """
    import numpy as np
    import neuronsim.nki as nki
    import neuronsim.nki.language as nl

    @nki.jit
    def copy(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    a = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    for _ in range(2):
        out = nki.simulate(copy)(a)
    print("copied", bool((out == a).all()))
"""

DEVICE = """
    import sys
    import torch
    x = torch.randn(32, 32).to("neuron")
    for _ in range(3):
        x = torch.tanh(x @ x)
    print("sum", float(x.sum().cpu()))
    sys.exit(4)
"""


def _write(tmp_path, body):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def _files(out):
    trace = json.loads((out / "trace.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "ops.csv") as f:
        ops = list(csv.DictReader(f))
    return trace, summary, ops


def test_profile_an_nki_script_with_instruction_detail(tmp_path):
    out = tmp_path / "prof"
    result = neuronsim("profile", "-o", out, "--detail", "instruction", "--no-host-ops",
                       _write(tmp_path, NKI_COPY))
    assert result.returncode == 0, result.stderr
    assert "copied True" in result.stdout and "neuronsim profile" in result.stdout
    trace, summary, ops = _files(out)
    check_trace(trace)
    assert summary["kernels"] == ["copy", "copy"]
    assert summary["dma_transfer_count"] == 4 and summary["hbm_read_bytes"] == 2 * 128 * 256 * 4
    assert summary["total_time"] > 0 and summary["detail"] == "instruction"
    instr = [e for e in trace["traceEvents"] if e["ph"] == "X" and "opcode" in e.get("args", {})]
    assert len(instr) == 4 and all(e["args"]["nki_source_location"].count(":") >= 1 for e in instr)
    assert ops and ops[0]["kind"] == "nki.simulate"


def test_profile_device_script_exit_code_and_host_plus_device_trace(tmp_path, monkeypatch):
    out = tmp_path / "prof"
    result = neuronsim("profile", "-o", out, "--html", "--json", _write(tmp_path, DEVICE))
    assert result.returncode == 4, result.stderr
    assert result.stdout.startswith("sum ")
    doc = json.loads(result.stdout.split("\n", 1)[1])
    trace, summary, ops = _files(out)
    assert doc == summary
    check_trace(trace)  # no torch.profiler events: our own phases only
    host = [e for e in trace["traceEvents"] if e.get("cat") == "host_op"]
    lane = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "stream" in e.get("args", {})]
    assert host and lane and not [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    # one host slice per device op, tiling the host track in issue order; each device op starts
    # when the host finished issuing it (the end of its host slice), in the same time base
    assert [e["name"] for e in host] == [e["name"].removeprefix("Memcpy HtoD (").removeprefix(
        "Memcpy DtoH (").removesuffix(")").removesuffix(" (host fallback)") for e in lane]
    for a, b in zip(host, host[1:], strict=False):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=2e-3)
    for h, d in zip(host, lane, strict=True):
        assert d["ts"] >= h["ts"] + h["dur"] - 2e-3
    assert host[0]["ts"] >= 0 and trace["baseTimeNanoseconds"] > 0
    assert summary["trace"]["host_op_events"] == len(host)
    _device_lane_matches_the_summary(trace, summary, ops, lane, out)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # our slices have ns resolution
    _hta_sees_the_device_time(trace, lane, tmp_path)


def test_profile_with_torch_profiler_host_ops(tmp_path, monkeypatch):
    out = tmp_path / "prof"
    result = neuronsim("profile", "-o", out, "--torch-profiler", "--html", _write(tmp_path, DEVICE))
    assert result.returncode == 4, result.stderr
    trace, summary, ops = _files(out)
    check_trace(trace, allow_foreign_phases=True)
    host = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    lane = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "stream" in e.get("args", {})]
    assert {"aten::mm", "aten::tanh"} <= {e["name"] for e in host} and lane
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "host_op"]
    _device_lane_matches_the_summary(trace, summary, ops, lane, out)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    _hta_sees_the_device_time(trace, lane, tmp_path)


def test_profile_without_host_ops_has_no_host_track(tmp_path):
    out = tmp_path / "prof"
    result = neuronsim("profile", "-o", out, "--no-host-ops", _write(tmp_path, DEVICE))
    assert result.returncode == 4, result.stderr
    trace, summary, _ = _files(out)
    check_trace(trace)
    assert not [e for e in trace["traceEvents"] if e.get("cat") in ("host_op", "cpu_op")]
    assert summary["kernel_count"] + summary["host_fallback_count"] >= 7
    assert "baseTimeNanoseconds" not in trace


def _device_lane_matches_the_summary(trace, summary, ops, lane, out):
    assert summary["host_fallback_count"] + summary["kernel_count"] >= 7  # 3 mm, 3 tanh, 1 sum
    assert summary["total_time"] == pytest.approx(sum(e["dur"] for e in lane) * 1e-6, rel=1e-3)
    assert {r["name"] for r in ops} >= {"aten::mm", "aten::tanh"}
    html = (out / "report.html").read_text()
    assert "<svg" in html and "http://" not in html and "https://" not in html


def _hta_sees_the_device_time(trace, lane, tmp_path):
    """Holistic Trace Analysis reads the profile's trace: the device lane's time is its busy time."""
    hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed")
    (tmp_path / "hta").mkdir()
    (tmp_path / "hta" / "trace.json").write_text(json.dumps(trace))
    breakdown = hta.TraceAnalysis(trace_dir=str(tmp_path / "hta")).get_temporal_breakdown(visualize=False)
    busy = breakdown["compute_time(us)"][0] + breakdown["non_compute_time(us)"][0]
    # HTA sums wall-clock-magnitude floats (~5e12 us, 1 ns resolution): allow a ns per slice
    assert busy == pytest.approx(sum(e["dur"] for e in lane), abs=1e-3 * len(lane))


def test_device_script_with_instruction_detail_draws_native_kernels_per_engine(tmp_path):
    out = tmp_path / "prof"
    result = neuronsim("profile", "-o", out, "--detail", "instruction", _write(tmp_path, DEVICE))
    assert result.returncode == 4, result.stderr
    trace, summary, _ = _files(out)
    check_trace(trace, allow_foreign_phases=True)
    events = trace["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    instr = [e for e in events if e["ph"] == "X" and "opcode" in e.get("args", {})]
    by_track = {tracks[(e["pid"], e["tid"])] for e in instr}
    assert {"VectorE", "ScalarE"} <= by_track and any(t.startswith("DMA q") for t in by_track)
    assert any(t.startswith("TensorE") for t in by_track)  # the matmuls
    # every instruction names the kernel library line that issued it
    assert all(e["args"]["nki_source_location"].startswith("neuronsim/kernels/") for e in instr)
    assert summary["tensor_engine_active_time"] > 0 and summary["matmul_instruction_count"] > 0


def test_view_prints_the_summary_its_json_and_writes_html(tmp_path):
    out = tmp_path / "prof"
    assert neuronsim("profile", "-o", out, "--no-host-ops", _write(tmp_path, NKI_COPY)).returncode == 0
    shown = neuronsim("view", out)
    assert shown.returncode == 0 and "total_time" in shown.stdout and "Engine active time" in shown.stdout
    as_json = neuronsim("view", out, "--json")
    assert json.loads(as_json.stdout) == json.loads((out / "summary.json").read_text())
    report = tmp_path / "r.html"
    assert neuronsim("view", out, "--html", report).returncode == 0
    assert report.read_text().startswith("<!DOCTYPE html>")


def test_view_of_a_directory_that_is_not_a_profile(tmp_path):
    result = neuronsim("view", tmp_path)
    assert result.returncode == 1 and "not a profile directory" in result.stderr


def test_profile_train_gpt_example(tmp_path):
    out = tmp_path / "gpt"
    result = neuronsim("profile", "-o", out, REPO / "examples" / "train_gpt.py", "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert "step    1 loss" in result.stdout
    trace, summary, ops = _files(out)
    check_trace(trace, allow_foreign_phases=True)
    assert summary["total_time"] > 0 and ops
