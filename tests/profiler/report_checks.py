"""What the browser tests check in a report: rows drawn against the trace, the axis, zoom and pan.

Driven through :class:`browser.Browser` with real input events; the timelines' ``state()``
(``neuronsimReport.timelines[i]``) says what was drawn.
"""

import pytest

from neuronsim.profiler.timeline_model import MAX_OP_CHILD_ROWS

UNITS = ("ns", "µs", "ms", "s")


def expected_rows(trace, part="device"):
    """Rows the timeline should draw, counted from the trace itself: every track with slices,
    every counter, and — where a device process has no instruction tracks — one row per op name
    of each op track (names beyond MAX_OP_CHILD_ROWS share one)."""
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    on_device = {pid for pid, n in names.items() if n.startswith("neuron:")}
    mine = (lambda pid: pid in on_device) if part == "device" else (lambda pid: pid not in on_device)
    tracks, counters = {}, set()
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and mine(e["pid"]):
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
        elif e["ph"] == "C" and mine(e["pid"]):
            counters.add((e["pid"], e["name"]))
    rows = len(tracks) + len(counters)
    if part == "device":
        def instructions(sl):
            return any("opcode" in s.get("args", {}) for s in sl)

        with_instructions = {pid for (pid, _), sl in tracks.items() if instructions(sl)}
        for (pid, _), sl in tracks.items():
            distinct = len({s["name"] for s in sl})
            if pid not in with_instructions and distinct > 1 and not instructions(sl):
                rows += min(distinct, MAX_OP_CHILD_ROWS) + (distinct > MAX_OP_CHILD_ROWS)
    return rows


def state(b, i=0):
    return b.eval(f"neuronsimReport.timelines[{i}].state()")


def rect(b, selector):
    b.eval(f"document.querySelector({selector!r}).scrollIntoView({{block: 'center'}})")
    b.frame()
    return b.eval(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect(); "
                  f"return [r.left, r.top, r.width, r.height]; }})()")


def visible_rect(b, selector):
    """``rect`` of the part of ``selector`` not hidden by its scrolling ancestor: a timeline's canvas
    taller than its ``.tl-scroll`` box is centred in it, so its top rows are scrolled out of sight."""
    x, y, w, h = rect(b, selector)
    box = b.eval(f"(() => {{ const s = document.querySelector({selector!r}).closest('.tl-scroll'); "
                 f"if (!s) return null; const r = s.getBoundingClientRect(); return [r.top, r.bottom]; }})()")
    if box is None:
        return [x, y, w, h]
    top, bottom = max(y, box[0]), min(y + h, box[1])
    return [x, top, w, bottom - top]


def slice_point(b, row, i=0, timeline=0):
    """Viewport coordinates of the middle of slice ``i`` of row ``row`` (scrolled into view)."""
    b.eval(f"document.querySelectorAll('.tl-canvas')[{timeline}].scrollIntoView({{block: 'start'}})")
    b.frame()
    return b.eval(f"""(() => {{ const t = neuronsimReport.timelines[{timeline}];
        const it = t.items.find(i => i.type === 'row' && i.row.name === {row!r});
        const l = it.row.lanes[0], r = t.canvas.getBoundingClientRect();
        return [r.left + t.xOf((l.start[{i}] + l.end[{i}]) / 2), r.top + it.y + 8]; }})()""")


def click(b, x, y, clicks=1):
    b.mouse("mouseMoved", x, y)
    for n in range(1, clicks + 1):
        b.mouse("mousePressed", x, y, n)
        b.mouse("mouseReleased", x, y, n)
    b.frame()


def check_renders(b, trace, *, timeline=0, part="device"):
    assert b.console_errors == [] and b.requests == []
    s = state(b, timeline)
    assert len(s["visibleRows"]) == expected_rows(trace, part) and s["rows"], s
    assert s["unit"] in UNITS
    label = b.eval(f"document.querySelectorAll('.tl-axis-label')[{timeline}].textContent")
    assert label.endswith(f"({s['unit']})")
    return s


def check_zoom(b, timeline=0):
    """Ctrl+wheel zooms in at the pointer, a drag pans, the wheel over the time axis zooms out."""
    root = "#" + b.eval(f"neuronsimReport.timelines[{timeline}].root.id")
    x, y, w, h = visible_rect(b, f"{root} .tl-canvas")
    before = state(b, timeline)
    pointer_t = before["start"] + 0.5 * (before["end"] - before["start"])
    b.wheel(x + w * 0.5, y + min(h, 200) / 2, -300, ctrl=True)
    zoomed = state(b, timeline)
    span = zoomed["end"] - zoomed["start"]
    assert span < 0.8 * (before["end"] - before["start"])
    assert zoomed["start"] <= pointer_t <= zoomed["end"]
    b.mouse("mouseMoved", x + w / 2, y + 30)
    b.mouse("mousePressed", x + w / 2, y + 30)
    b.mouse("mouseMoved", x + w / 2 - 100, y + 30)
    b.mouse("mouseReleased", x + w / 2 - 100, y + 30)
    b.frame()
    panned = state(b, timeline)
    assert panned["end"] - panned["start"] == pytest.approx(span)
    assert panned["start"] - zoomed["start"] == pytest.approx(100 / w * span, rel=0.05)
    ax = rect(b, f"{root} .tl-axis")
    b.wheel(ax[0] + ax[2] / 2, ax[1] + ax[3] / 2, 300)  # over the axis: zooms without a modifier
    out = state(b, timeline)
    assert out["end"] - out["start"] > span
    return zoomed
