"""A self-contained HTML report of a profile: summary cards, recommendations, engine utilization,
an engine timeline drawn from the trace, the op table. Inline CSS and SVG; no network, no scripts
needed (hover titles carry the details)."""

from __future__ import annotations

import html
from collections.abc import Mapping

TIMELINE_WIDTH = 1100  # px; each track is drawn at this many bins, so the file stays small
ROW_HEIGHT, LABEL_WIDTH = 18, 230
MAX_TRACKS = 48
MAX_OP_ROWS = 60
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
COLOURS = {
    "tensor": "#d62728",
    "vector": "#1f77b4",
    "scalar": "#2ca02c",
    "gpsimd": "#9467bd",
    "sync": "#8c564b",
    "dma": "#ff7f0e",
    "kernel": "#17becf",
    "fallback": "#e377c2",
    "transfer": "#bcbd22",
    "aggregated": "#7f7f7f",
    "cpu_op": "#aaaaaa",
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#666;margin-bottom:16px}.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:150px}
.card .v{font-size:20px;font-weight:600}.card .k{font-size:12px;color:#666}
.rec{background:#fff8e1;border-left:4px solid #f0a500;padding:8px 12px;margin:6px 0;border-radius:4px}
table{border-collapse:collapse;background:#fff;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px}
th{background:#f0f0f0;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
svg text{font-size:11px;font-family:inherit}.note{color:#666;font-size:13px}
"""


def _e(x) -> str:
    return html.escape(str(x))


def fmt_time(seconds: float) -> str:
    s = float(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def _cards(s: Mapping) -> str:
    items = [
        ("total_time", fmt_time(s.get("total_time", 0))),
        ("mfu_estimated_percent", f"{s.get('mfu_estimated_percent', 0):.2f}%"),
        ("model_flops", f"{s.get('model_flops', 0):.3g}"),
        ("tensor_engine_active_time_percent", f"{s.get('tensor_engine_active_time_percent', 0):.1f}%"),
        ("dma_active_time_percent", f"{s.get('dma_active_time_percent', 0):.1f}%"),
        ("hbm_read_bytes", fmt_bytes(s.get("hbm_read_bytes", 0))),
        ("hbm_write_bytes", fmt_bytes(s.get("hbm_write_bytes", 0))),
        ("dma_transfer_average_bytes", fmt_bytes(s.get("dma_transfer_average_bytes", 0))),
        ("host_fallback_time", fmt_time(s.get("host_fallback_time", 0))),
        ("sbuf_peak_bytes", fmt_bytes(s.get("sbuf_peak_bytes", 0))),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def _utilization_svg(s: Mapping) -> str:
    rows = [(e, s.get(f"{e}_engine_active_time_percent", 0.0)) for e in ENGINES]
    rows.append(("dma", s.get("dma_active_time_percent", 0.0)))
    width, bar = 520, 360
    parts = [
        f'<svg width="{width}" height="{len(rows) * 24 + 10}" role="img" aria-label="engine utilization">'
    ]
    for i, (name, pct) in enumerate(rows):
        y = 6 + i * 24
        w = max(0.0, min(100.0, pct)) / 100 * bar
        parts.append(
            f'<text x="0" y="{y + 13}">{_e(name)}</text>'
            f'<rect x="80" y="{y}" width="{bar}" height="16" fill="#eee"/>'
            f'<rect x="80" y="{y}" width="{w:.1f}" height="16" fill="{COLOURS[name]}">'
            f"<title>{_e(name)}: {pct:.2f}% active</title></rect>"
            f'<text x="{88 + bar}" y="{y + 13}">{pct:.1f}%</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _tracks(trace: Mapping) -> tuple[list, float, float]:
    pnames, tnames, spans = {}, {}, {}
    for e in trace.get("traceEvents", []):
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "M":
            if e.get("name") == "process_name":
                pnames[e.get("pid")] = e.get("args", {}).get("name", "")
            elif e.get("name") == "thread_name":
                tnames[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "X" and isinstance(e.get("ts"), int | float):
            spans.setdefault((e.get("pid"), e.get("tid")), []).append(
                (e["ts"], e["ts"] + e.get("dur", 0), e.get("cat", ""))
            )
    if not spans:
        return [], 0.0, 0.0
    # device tracks first (they are what the report is about), then host tracks
    keys = sorted(
        spans, key=lambda k: (not str(pnames.get(k[0], "")).startswith("neuron:"), str(k[0]), str(k[1]))
    )
    keys = keys[:MAX_TRACKS]
    lo = min(s for k in keys for s, _, _ in spans[k])
    hi = max(e for k in keys for _, e, _ in spans[k])
    rows = [(f"{pnames.get(k[0], k[0])} / {tnames.get(k, k[1])}", spans[k]) for k in keys]
    return rows, lo, hi


def _timeline_svg(trace: Mapping) -> str:
    rows, lo, hi = _tracks(trace)
    if not rows:
        return '<p class="note">The trace has no slices.</p>'
    span = max(hi - lo, 1e-9)
    bins = TIMELINE_WIDTH
    height = len(rows) * ROW_HEIGHT + 24
    parts = [
        f'<svg width="{LABEL_WIDTH + bins + 10}" height="{height}" role="img" aria-label="engine timeline">'
    ]
    for r, (label, spans) in enumerate(rows):
        y = r * ROW_HEIGHT
        short = label if len(label) <= 40 else "…" + label[-39:]
        parts.append(
            f'<text x="0" y="{y + 12}"><title>{_e(label)}</title>{_e(short)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 2}" width="{bins}" height="{ROW_HEIGHT - 4}" fill="#f2f2f2"/>'
        )
        cover = [0.0] * bins
        cats: dict[int, str] = {}
        for s, e, cat in spans:
            b0 = int((s - lo) / span * bins)
            b1 = min(bins - 1, int((e - lo) / span * bins))
            for b in range(max(0, b0), b1 + 1):
                left, right = lo + b * span / bins, lo + (b + 1) * span / bins
                cover[b] += max(0.0, min(e, right) - max(s, left)) / (span / bins)
                cats.setdefault(b, cat)
        b = 0
        while b < bins:
            if cover[b] <= 0:
                b += 1
                continue
            start = b
            while b < bins and cover[b] > 0:
                b += 1
            busy = sum(min(1.0, c) for c in cover[start:b]) / (b - start)
            colour = COLOURS.get(cats.get(start, ""), "#4c78a8")
            t0 = start * span / bins
            parts.append(
                f'<rect x="{LABEL_WIDTH + start}" y="{y + 2}" width="{b - start}" height="{ROW_HEIGHT - 4}" '
                f'fill="{colour}" fill-opacity="{0.35 + 0.65 * busy:.2f}"><title>{_e(label)}: '
                f"{t0:.3f}-{b * span / bins:.3f} us from start, {100 * busy:.0f}% busy</title></rect>"
            )
    parts.append(
        f'<text x="{LABEL_WIDTH}" y="{height - 6}">0</text>'
        f'<text x="{LABEL_WIDTH + bins - 80}" y="{height - 6}">{span:.3f} us</text></svg>'
    )
    return "".join(parts)


def _op_table(ops: list) -> str:
    if not ops:
        return '<p class="note">No ops.</p>'
    head = (
        "<tr><th>name</th><th>kind</th><th>count</th><th>total time</th><th>avg</th><th>% of total</th>"
        "<th>model FLOPs</th><th>bytes</th></tr>"
    )
    body = "".join(
        f"<tr><td>{_e(r.get('name'))}</td><td>{_e(r.get('kind'))}</td>"
        f"<td class=n>{r.get('count', 0)}</td><td class=n>{fmt_time(r.get('total_time', 0))}</td>"
        f"<td class=n>{fmt_time(r.get('average_time', 0))}</td>"
        f"<td class=n>{r.get('total_time_percent', 0):.1f}%</td>"
        f"<td class=n>{r.get('model_flops', 0):.3g}</td>"
        f"<td class=n>{fmt_bytes(r.get('bytes', 0))}</td></tr>"
        for r in ops[:MAX_OP_ROWS]
    )
    more = (
        f'<p class="note">{len(ops) - MAX_OP_ROWS} more rows in ops.csv.</p>'
        if len(ops) > MAX_OP_ROWS
        else ""
    )
    return f"<table>{head}{body}</table>{more}"


def _fields_table(doc: Mapping) -> str:
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td class=n>{_e(f'{v:.6g}' if isinstance(v, float) else v)}</td></tr>"
        for k, v in doc.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    )
    return f"<table><tr><th>field</th><th>value</th></tr>{rows}</table>"


def render_html(doc: Mapping, trace: Mapping) -> str:
    recs = (
        "".join(
            f'<div class="rec"><b>{_e(r["title"])}</b> — {_e(r["detail"])}</div>'
            for r in doc.get("recommendations", [])
        )
        or '<p class="note">No recommendations.</p>'
    )
    fallback = doc.get("fallback_ops", {})
    fb = (
        "<table><tr><th>op</th><th>calls</th></tr>"
        + "".join(f"<tr><td>{_e(k)}</td><td class=n>{v}</td></tr>" for k, v in fallback.items())
        + "</table>"
        if fallback
        else '<p class="note">None.</p>'
    )
    stats = doc.get("trace", {})
    capped = (
        '<p class="note">The trace was capped: '
        f"{stats.get('aggregated_instructions', 0)} instructions and {stats.get('aggregated_ops', 0)} ops "
        "were aggregated.</p>"
        if stats.get("aggregated")
        else ""
    )
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in doc.get("notes", []))
    kernels = ", ".join(doc.get("kernels", []))
    kernels = f" · kernels {_e(kernels)}" if kernels else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>neuronsim profile</title><style>{CSS}</style></head>
<body>
<h1>neuronsim profile</h1>
<div class="sub">chip {_e(doc.get("chip", "?"))} · detail {_e(doc.get("detail", "?"))}{kernels}</div>
{_cards(doc)}
<h2>Recommendations</h2>{recs}
<h2>Engine utilization</h2>{_utilization_svg(doc)}
<h2>Timeline</h2>{capped}{_timeline_svg(trace)}
<h2>Ops</h2>{_op_table(doc.get("ops", []))}
<h2>Host fallback ops</h2>{fb}
<h2>All summary fields</h2>{_fields_table(doc)}
{notes}
</body></html>
"""
