"""The HTML report in a real browser (headless Chromium over the DevTools protocol): it renders
without console errors or network requests, draws one row per track of the trace, labels its time
axis with units, and zooms, pans, hovers, sorts and finds ops as a user would, with real input events.

Skipped when no Chromium is installed, except under NEURON_SIM_REQUIRE_BROWSER=1 (.ci/run), where
that is a failure. Screenshots go to the test's tmp_path.
"""

import time

import pytest
from browser import Browser, browser_or_skip
from profiled_programs import mixed_run
from report_checks import check_renders, check_zoom, click, rect, slice_point, state

from neuronsim.profiler import report, session
from neuronsim.profiler.events import DeviceOpEvent
from neuronsim.profiler.html import render_html

COUNTS = "Array.from(document.querySelectorAll('table.ops tbody tr')).map(r => +r.cells[2].dataset.v)"


@pytest.fixture(scope="module")
def browser():
    with Browser(browser_or_skip()) as b:
        yield b


def test_kernel_report_draws_every_engine_track_zooms_hovers_sorts_and_finds_ops(browser, tmp_path):
    doc, trace = report.kernel_profile(mixed_run())
    page = tmp_path / "kernel.html"
    page.write_text(render_html(doc, trace))
    b = browser
    b.open(page)
    b.frame()
    s = check_renders(b, trace)
    assert {"TensorE (LoadStationary)", "TensorMatrix (MultiplyMoving)", "VectorE", "ScalarE", "DMA q0",
            "Kernel"} <= set(s["visibleRows"])
    b.screenshot(tmp_path / "kernel.png")
    check_zoom(b)
    # double-click a slice: the view is that slice (and a margin)
    x, y = slice_point(b, "VectorE")
    click(b, x, y, clicks=2)
    one = b.eval("""(() => { const t = neuronsimReport.timelines[0];
        const l = t.rows.find(r => r.name === 'VectorE').lanes[0]; return [l.start[0], l.end[0]]; })()""")
    z = state(b)
    assert z["start"] <= one[0] and z["end"] >= one[1]
    assert z["end"] - z["start"] < 1.5 * (one[1] - one[0]) + 20
    # hover: op, instruction, engine and the kernel's line
    x, y = slice_point(b, "VectorE")
    b.mouse("mouseMoved", x, y)
    b.frame()
    tip = b.eval("document.querySelector('.tl-tooltip').innerText")
    assert "instruction" in tip and "engine vector" in tip
    assert "kernel line tests/profiler/profiled_programs.py:" in tip
    assert "op mixed" in tip and "kernel mixed" in tip  # the launch the instruction ran in, its kernel
    # the op table sorts on a click of its header
    hx, hy, hw, hh = rect(b, "table.ops thead th:nth-child(3)")
    click(b, hx + hw / 2, hy + hh / 2)
    counts = b.eval(COUNTS)
    assert counts == sorted(counts) and len(counts) == len(doc["ops"])
    click(b, hx + hw / 2, hy + hh / 2)
    counts = b.eval(COUNTS)
    assert counts == sorted(counts, reverse=True)
    # an op name finds the op in the timeline
    lx, ly, lw, lh = rect(b, "table.ops .op-link[data-op='dma_copy']")
    click(b, lx + lw / 2, ly + lh / 2)
    found = b.eval("[document.querySelector('.tl-toolbar input').value, "
                   "document.querySelector('.tl-matches').textContent]")
    assert found[0] == "dma_copy" and found[1].startswith("1 / ")
    assert b.console_errors == []


def _session_with_host_lane():
    run = mixed_run()
    rec = session.start("op")
    session.stop()
    t0 = rec.started_wall_ns
    names = ["aten::mm", "aten::add.Tensor", "aten::mm", "aten::relu", "aten::mm"]
    events, at = [], 0.0
    for i, name in enumerate(names):
        events.append(DeviceOpEvent(name, at, 3000.0 + 1000 * i, True, launch_ns=1000.0, kernel=run,
                                    wall_ns=t0 + 1_000_000 * (i + 1)))
        at += 3000.0 + 1000 * i
    events.append(DeviceOpEvent("aten::sort", at, 20000.0, False, wall_ns=t0 + 9_000_000))
    return report.session_profile(rec, {0: events}, run.chip, host_base_ns=t0, host_lane=True)


def test_session_report_has_per_op_rows_on_the_device_clock_and_the_host_apart(browser, tmp_path):
    doc, trace = _session_with_host_lane()
    page = tmp_path / "session.html"
    page.write_text(render_html(doc, trace))
    b = browser
    b.open(page)
    b.frame()
    device = check_renders(b, trace)
    host = check_renders(b, trace, timeline=1, part="host")
    assert device["visibleRows"][:4] == ["Device ops", "aten::mm", "aten::relu", "aten::add.Tensor"]
    assert host["visibleRows"] == ["Host: time to issue each device op"]
    # the device timeline is the simulated clock: the ops back to back, total_time long
    assert device["end"] - device["start"] == pytest.approx(doc["total_time"] * 1e9, rel=1e-6)
    assert b.eval("document.querySelectorAll('.tl-axis-label')[1].textContent").startswith("wall-clock")
    check_zoom(b, timeline=0)
    # a row name zooms to that row
    lx, ly, lw, lh = rect(b, "#tl0-device .tl-label.child")
    click(b, lx + lw - 10, ly + lh / 2)
    s = state(b)
    assert s["end"] - s["start"] < device["end"] - device["start"]
    b.screenshot(tmp_path / "session.png")
    assert b.console_errors == []


def test_the_biggest_report_loads_and_draws(browser, tmp_path):
    """A report at the slice cap (aggregated past it) loads and draws without errors."""
    from neuronsim.profiler.timeline_model import REPORT_MAX_SLICES

    n = REPORT_MAX_SLICES + 50_000
    events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
               "args": {"name": "neuron:0 NeuronCore"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 12, "args": {"name": "VectorE"}}]
    events += [{"ph": "X", "pid": 0, "tid": 12, "name": "tensor_tensor", "ts": i * 0.01, "dur": 0.005,
                "args": {"opcode": "tensor_tensor", "engine": "vector", "index": i % 50}} for i in range(n)]
    trace = {"traceEvents": events, "displayTimeUnit": "ns"}
    page = tmp_path / "big.html"
    page.write_text(render_html({"chip": "trn2", "detail": "instruction"}, trace))
    b = browser
    started = time.monotonic()
    b.open(page)
    b.frame()
    assert b.console_errors == [] and time.monotonic() - started < b.timeout
    assert state(b)["rows"] == ["VectorE"]
    assert "drawn as runs" in b.eval("document.getElementById('timeline').textContent")
    check_zoom(b)
