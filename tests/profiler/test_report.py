"""Profile documents: kernel launches, profiling sessions, recommendations, the HTML report."""

import csv
import json

import pytest
from profiled_programs import dma_only_run, mixed_run

from neuronsim.profiler import report, session
from neuronsim.profiler import summary as S
from neuronsim.profiler.events import DeviceOpEvent, PlacedRun
from neuronsim.profiler.html import render_html
from neuronsim.profiler.validate import check_trace


def test_launch_over_two_cores_averages_percents_and_scales_the_peak():
    run = mixed_run()
    t = run.total_ns
    placed = [PlacedRun(run, 0, 0.0), PlacedRun(run, 1, 0.0), PlacedRun(run, 0, t)]
    s = S.launch_summary(placed, run.chip)
    one = S.summarize(run)
    assert s["neuroncore_count"] == 2
    assert s["total_time"] == pytest.approx(2 * one["total_time"])
    assert s["model_flops"] == 3 * one["model_flops"]
    assert s["vector_engine_active_time"] == pytest.approx(3 * one["vector_engine_active_time"])
    assert s["vector_engine_active_time_percent"] == pytest.approx(
        100 * s["vector_engine_active_time"] / (s["total_time"] * 2))
    assert s["mfu_estimated_percent"] == pytest.approx(
        100 * s["model_flops"] / (2 * run.chip.tensor_engine_peak_flops_bf16 * s["total_time"]))


def test_kernel_profile_document_and_files(tmp_path):
    run = mixed_run()
    doc, trace = report.kernel_profile([PlacedRun(run, 0, 0.0), PlacedRun(run, 1, 0.0)], name="grid")
    check_trace(trace)
    assert doc["kernels"] == ["grid"] and doc["detail"] == "instruction"
    assert {f for f in S.FIELDS} <= set(doc)
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert len(processes) == 2 and all(p.startswith("neuron:") for p in processes)
    assert sum(r["count"] for r in doc["ops"]) == 2 * len(run.program.instructions)
    out = report.write_profile(tmp_path / "p", doc, trace)
    assert report.load_summary(out) == json.loads(json.dumps(doc))
    with open(out / report.OPS_FILE) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(report.OPS_COLUMNS) and len(rows) == len(doc["ops"])


def test_session_profile_of_device_ops_and_a_launch():
    run = dma_only_run()
    rec = session.start("instruction")
    try:
        session.record_launch([PlacedRun(run)], "dma_only")
    finally:
        assert session.stop() is rec
    session.record_launch([PlacedRun(run)], "ignored")  # no session: a no-op
    events = [DeviceOpEvent("aten::add.Tensor", 0.0, 3000.0, True, launch_ns=1000.0, kernel=run),
              DeviceOpEvent("aten::sort", 3000.0, 20000.0, False)]
    doc, trace = report.session_profile(rec, {0: events}, run.chip)
    check_trace(trace)
    assert len(rec.launches) == 1 and doc["kernels"] == ["dma_only"]
    k = S.summarize(run)
    assert doc["dma_transfer_count"] == 2 * k["dma_transfer_count"]
    assert doc["host_fallback_time"] == pytest.approx(20000e-9)
    assert doc["total_time"] == pytest.approx(23000e-9 + k["total_time"])
    assert doc["fallback_ops"] == {"aten::sort": 1}
    names = {r["name"] for r in doc["ops"]}
    assert names == {"aten::add.Tensor", "aten::sort", "dma_only"}


def _fields(**kw):
    s = S.empty_summary()
    s.update(total_time=1e-3, **kw)
    return s


@pytest.mark.parametrize("fields,expect", [
    (_fields(dma_active_time_percent=90.0, tensor_engine_active_time_percent=20.0), "dma_bound"),
    (_fields(dma_transfer_count=10, dma_transfer_average_bytes=2048.0), "small_dma"),
    (_fields(host_fallback_time_percent=75.0, host_fallback_count=3), "host_fallbacks"),
    (_fields(tensor_engine_active_time_percent=2.0, model_flops=10), "tensor_idle"),
])
def test_recommendations(fields, expect):
    assert expect in {r["id"] for r in report.recommendations(fields)}


def test_no_recommendation_for_a_busy_tensor_engine_with_big_dmas():
    fields = _fields(tensor_engine_active_time_percent=85.0, dma_active_time_percent=40.0, model_flops=10,
                     dma_transfer_count=4, dma_transfer_average_bytes=256 * 1024.0)
    assert report.recommendations(fields) == []


def test_html_report_is_self_contained():
    doc, trace = report.kernel_profile(mixed_run())
    page = render_html(doc, trace)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2
    assert "http://" not in page and "https://" not in page and "<script src" not in page
    assert page.count("</script>") == page.count("<script")  # the inlined code never ends its element early
    drawn = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] in drawn:
            assert e["args"]["name"] in page  # every track with slices has a timeline row
    assert "DMA q0" in page
    assert "Engine utilization" in page and "Timeline" in page
