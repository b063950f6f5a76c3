"""Two profiles compared: summary, engine and op deltas (B against A), the sides' names, the HTML."""

import pytest
from profiled_programs import dma_only_run, mixed_run

from neuronsim.profiler import report
from neuronsim.profiler.compare import SUMMARY_FIELDS, compare_profiles, side_names
from neuronsim.profiler.compare_html import render_compare_html


def _doc(total, ops, **fields):
    return {"chip": "trn2", "detail": "op", "total_time": total, "ops": ops, **fields}


def _op(name, kind, count, t):
    return {"name": name, "kind": kind, "count": count, "total_time": t}


def test_deltas_are_b_minus_a_and_ratios_b_over_a():
    a = _doc(2e-3, [_op("aten::mm", "kernel", 4, 1e-3), _op("aten::sort", "fallback", 1, 5e-4)],
             tensor_engine_active_time=4e-4, tensor_engine_active_time_percent=20.0, dma_active_time=1e-3)
    b = _doc(1e-3, [_op("aten::mm", "kernel", 4, 4e-4), _op("aten::gelu", "kernel", 2, 1e-4)],
             tensor_engine_active_time=2e-4, tensor_engine_active_time_percent=20.0, dma_active_time=0.0)
    c = compare_profiles(a, b, ("trn2", "trn3"))
    assert [r["field"] for r in c["summary"]] == [f for f, _ in SUMMARY_FIELDS]
    total = c["summary"][0]
    assert total == {"field": "total_time", "kind": "time", "a": 2e-3, "b": 1e-3, "delta": -1e-3,
                     "ratio": 0.5}
    tensor = next(r for r in c["engines"] if r["engine"] == "tensor")
    assert tensor["delta"] == pytest.approx(-2e-4) and tensor["ratio"] == pytest.approx(0.5)
    dma = next(r for r in c["engines"] if r["engine"] == "dma")
    assert dma["b"] == 0.0 and dma["ratio"] == 0.0
    # largest change first; an op one side never ran has zeros on the other
    assert [(r["name"], r["a_count"], r["b_count"]) for r in c["ops"]] == [
        ("aten::mm", 4, 4), ("aten::sort", 1, 0), ("aten::gelu", 0, 2)]
    assert c["ops"][2]["ratio"] is None
    assert c["a"]["name"] == "trn2" and c["b"]["name"] == "trn3"


def test_sides_are_named_by_chip_when_they_differ_else_by_directory():
    a, b = {"chip": "trn2"}, {"chip": "trn3"}
    assert side_names(a, b, "x/p", "y/q") == ("trn2", "trn3")
    assert side_names(a, a, "runs/before", "runs/after") == ("before", "after")
    assert side_names(a, a, "one/prof", "two/prof") == ("one/prof", "two/prof")


def test_compare_report_has_both_timelines_linked_and_the_deltas():
    doc_a, trace_a = report.kernel_profile(mixed_run("trn2"))
    doc_b, trace_b = report.kernel_profile(mixed_run("trn3"))
    c = compare_profiles(doc_a, doc_b, ("trn2", "trn3"))
    page = render_compare_html(c, (doc_a, trace_a), (doc_b, trace_b))
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page and "https://" not in page
    assert page.count('data-timeline="') == 2 and "data-link-timelines" in page
    assert "trn3 vs trn2" in page and 'class="sortable compare-ops"' in page
    assert page.count("<svg") == 3  # engines, and each side's DMA sizes
    assert "dma_copy" in page


def test_a_profile_compared_with_itself_has_no_change():
    doc, _ = report.kernel_profile(dma_only_run())
    c = compare_profiles(doc, doc)
    assert all(r["delta"] == 0 for r in c["summary"] + c["engines"] + c["ops"])
