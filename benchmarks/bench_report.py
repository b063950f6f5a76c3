"""The HTML report on the largest trace ``neuronsim profile`` writes: build time, size, and how
responsive it is in headless Chromium.

The trace is made the way ``neuronsim profile --detail instruction`` makes it (report.session_profile
with its host track), from more device ops than its default caps keep: 250,000 native ops, each a
real scheduled kernel, so the trace holds its maximum — 200,000 instruction and counter events,
200,000 op slices and 200,000 host slices, the rest aggregated. Printed: the trace's slices, the
time to build the report (Python) and its size, then in Chromium the time to load it (parse and
first draw), the time of a full-view frame, and of frames while zooming in with Ctrl+wheel (20
steps) and panning — the browser's own ``performance.now()`` around each draw. Measured in one run:
compare figures between runs of the same machine only.

    python benchmarks/bench_report.py [--ops 250000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "profiler"))  # the DevTools-protocol driver of the browser tests


def kernel():
    """A small real kernel: loads, a matmul, an activation, a store (five engines' tracks)."""
    from neuronsim import sim
    from neuronsim.profiler.events import KernelRun
    from neuronsim.sim import ActFunc, Opcode, ProgramBuilder

    b = ProgramBuilder("bench_kernel", location="bench_report.py:1")
    a = b.hbm("a", (128, 128), "bfloat16")
    w = b.hbm("w", (128, 512), "bfloat16")
    out = b.hbm("out", (128, 512), "float32", kind="output")
    a_sb, w_sb = b.sbuf("a_sb", (128, 128), "bfloat16"), b.sbuf("w_sb", (128, 512), "bfloat16")
    b.emit(Opcode.DMA_COPY, a_sb, [a], location="bench_report.py:2", queue=0)
    b.emit(Opcode.DMA_COPY, w_sb, [w], location="bench_report.py:3", queue=1)
    ps = b.psum("ps", (128, 512), "float32")
    b.emit(Opcode.NC_MATMUL, ps, [a_sb, w_sb], location="bench_report.py:4")
    act = b.sbuf("act", (128, 512), "float32")
    b.emit(Opcode.ACTIVATION, act, [ps], func=ActFunc.relu, location="bench_report.py:5")
    b.emit(Opcode.DMA_COPY, out, [act], location="bench_report.py:6", queue=2)
    return KernelRun.from_prepared(sim.prepare(b.build(), "trn2"))


def biggest_profile(n_ops: int):
    from neuronsim.profiler import report, session
    from neuronsim.profiler.events import DeviceOpEvent

    run = kernel()
    rec = session.start("instruction")
    session.stop()
    t0, at, events = rec.started_wall_ns, 0.0, []
    names = [f"aten::op{i}" for i in range(60)]
    for i in range(n_ops):
        d = run.total_ns + 1000.0
        events.append(DeviceOpEvent(names[i % 60], at, d, True, launch_ns=1000.0, kernel=run,
                                    wall_ns=t0 + 20_000 * (i + 1)))
        at += d
    return report.session_profile(rec, {0: events}, run.chip, host_base_ns=t0, host_lane=True)


def measure_browser(page: Path) -> dict:
    from browser import Browser, find_browser

    path = find_browser()
    if path is None:
        return {"browser": "not found (apt-get install -y chromium)"}
    with Browser(path, timeout=300) as b:
        start = time.perf_counter()
        b.open(page)
        b.frame()
        load = time.perf_counter() - start
        st = b.eval("neuronsimReport.timelines[0].state()")
        full = st["drawMs"]
        x, y, w, _ = b.eval("(() => { const r = document.querySelector('#tl0-device .tl-canvas')"
                            ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
        b.eval("document.querySelector('#tl0-device').scrollIntoView()")
        b.frame()
        x, y, w, _ = b.eval("(() => { const r = document.querySelector('#tl0-device .tl-canvas')"
                            ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
        frames = []
        for _ in range(20):
            b.wheel(x + w * 0.4, y + 60, -120, ctrl=True)
            frames.append(b.eval("neuronsimReport.timelines[0].state().drawMs"))
        for _ in range(10):
            b.mouse("mousePressed", x + w / 2, y + 60)
            b.mouse("mouseMoved", x + w / 2 - 150, y + 60)
            b.mouse("mouseReleased", x + w / 2 - 150, y + 60)
            b.frame()
            frames.append(b.eval("neuronsimReport.timelines[0].state().drawMs"))
        refits = []
        for _ in range(5):
            b.eval("neuronsimReport.timelines[0].act('all')")
            b.frame()
            refits.append(b.eval("neuronsimReport.timelines[0].state().drawMs"))
        errors = list(b.console_errors)
    return {"load_s": round(load, 2), "first_draw_ms": round(full, 1),
            "full_view_draw_ms_median": round(statistics.median(refits), 1),
            "zoom_pan_draw_ms_median": round(statistics.median(frames), 1),
            "zoom_pan_draw_ms_max": round(max(frames), 1), "console_errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=250_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", metavar="FILE", help="also write the report to FILE")
    args = parser.parse_args()
    from neuronsim.profiler.html import render_html
    from neuronsim.profiler.timeline_model import REPORT_MAX_SLICES

    t = time.perf_counter()
    doc, trace = biggest_profile(args.ops)
    trace_s = time.perf_counter() - t
    slices = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    t = time.perf_counter()
    page_text = render_html(doc, trace)
    build_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(page_text)
        if args.keep:
            Path(args.keep).write_text(page_text)
        result = {"ops": args.ops, "trace_slices": slices, "trace_events": len(trace["traceEvents"]),
                  "report_max_slices": REPORT_MAX_SLICES, "trace_build_s": round(trace_s, 1),
                  "report_build_s": round(build_s, 1), "report_mib": round(len(page_text) / 2**20, 1),
                  **measure_browser(page)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for k, v in result.items():
        print(f"{k:28} {v}")


if __name__ == "__main__":
    main()
