"""The HTML report of a profile: one self-contained file (no network, no CDN).

Sections: summary cards, recommendations with the ops behind them, the timeline (zoomable and
pannable: one row per engine and DMA queue, per op, per host track), engine-utilization and
DMA-size charts, the sortable op table, host fallbacks, every summary field. Python writes the
static parts; the timeline and table sorting are the hand-written ``assets/*.js`` and
``assets/report.css``, inlined. The timeline's data is :mod:`neuronsim.profiler.timeline_model`'s.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

from neuronsim.profiler import charts
from neuronsim.profiler.timeline_model import model_json, timeline_models
from neuronsim.profiler.units import fmt_bytes, fmt_time

__all__ = ["fmt_bytes", "fmt_time", "page", "render_html", "timeline_block"]

MAX_OP_ROWS = 5000
ENGINE_COLUMNS = ("tensor", "vector", "scalar", "gpsimd", "dma")


def _e(x) -> str:
    return html.escape(str(x))


SCRIPTS = ("format.js", "timeline.js", "page.js")  # hand-written, no libraries; inlined in this order


def asset(name: str) -> str:
    return (resources.files("neuronsim.profiler") / "assets" / name).read_text(encoding="utf-8")


def script() -> str:
    """The report's JavaScript: the asset files in one strict-mode function (nothing global but
    ``window.neuronsimReport``)."""
    body = "\n".join(asset(name) for name in SCRIPTS)
    return f'(function () {{\n"use strict";\n{body}}})();'


def page(title: str, subtitle: str, sections: Iterable[tuple[str, str, str]]) -> str:
    """A whole report page; ``sections`` are (anchor, heading, body html)."""
    sections = list(sections)
    toc = " ".join(f'<a href="#{a}">{_e(h)}</a>' for a, h, _ in sections if h)
    body = "\n".join(f'<section id="{a}">' + (f"<h2>{_e(h)}</h2>" if h else "") + f"{b}</section>"
                     for a, h, b in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{asset('report.css')}</style></head>\n"
            f"<body><main><h1>{_e(title)}</h1><div class=\"sub\">{subtitle}</div>"
            f'<nav class="toc">{toc}</nav>\n{body}\n</main>'
            f"<script>{script()}</script></body></html>\n")


PART_TITLES = {
    "device": "Device — simulated time: ops back to back as the device clock ran them",
    "host": "Host — wall-clock time on the machine that ran the simulation (not simulated)",
}


def _mount(model: Mapping, dom_id: str, title: str) -> str:
    stats = model["stats"]
    notes = ""
    if stats["aggregated_slices"]:
        notes = (f'<p class="note">The report draws at most {stats["max_slices"]:,} slices: '
                 f'{stats["aggregated_slices"]:,} of the trace\'s {stats["source_slices"]:,} are drawn as '
                 f"runs (\"N slices (aggregated)\"); trace.json has them all.</p>")
    if stats["undrawn_nested_slices"]:
        deep = stats["undrawn_nested_slices"]
        notes += f'<p class="note">{deep:,} slices nested too deep are not drawn.</p>'
    return (f'{notes}<div data-timeline="{dom_id}-data" data-title="{_e(title)}" id="{dom_id}">'
            f'<p class="note">The timeline needs JavaScript.</p></div>'
            f'<script type="application/json" id="{dom_id}-data">{model_json(model)}</script>')


def timeline_block(trace: Mapping, dom_id: str, title: str = "", host: bool = True) -> str:
    """The timelines' mount points and their data: the device, then the host apart (``host``)."""
    models = timeline_models(trace)
    if not models:
        return '<p class="note">The trace has no slices.</p>'
    out = []
    for part, model in models.items():
        if part == "host" and not host:
            continue
        out.append(_mount(model, f"{dom_id}-{part}", f"{title}{PART_TITLES[part]}"))
    return "".join(out)


def cards(doc: Mapping) -> str:
    items = [
        ("total_time", fmt_time(doc.get("total_time", 0))),
        ("mfu_estimated_percent", f"{doc.get('mfu_estimated_percent', 0):.2f}%"),
        ("model_flops", f"{doc.get('model_flops', 0):.3g}"),
        ("tensor_engine_active_time_percent", f"{doc.get('tensor_engine_active_time_percent', 0):.1f}%"),
        ("dma_active_time_percent", f"{doc.get('dma_active_time_percent', 0):.1f}%"),
        ("hbm_read_bytes", fmt_bytes(doc.get("hbm_read_bytes", 0))),
        ("hbm_write_bytes", fmt_bytes(doc.get("hbm_write_bytes", 0))),
        ("dma_transfer_average_bytes", fmt_bytes(doc.get("dma_transfer_average_bytes", 0))),
        ("host_fallback_time", fmt_time(doc.get("host_fallback_time", 0))),
        ("sbuf_peak_bytes", fmt_bytes(doc.get("sbuf_peak_bytes", 0))),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>' for k, v in items
    ) + "</div>"


def op_link(name: str, timeline: int | str = 0) -> str:
    """An op name that finds the op in timeline ``timeline`` (an index, or "all")."""
    return (f'<span class="op-link" data-op="{_e(name)}" data-timeline-index="{timeline}" '
            f'title="show in the timeline">{_e(name)}</span>')


def _code(text: str) -> str:
    return f"<code>{_e(text)}</code>"


def recommendations_html(recs: Sequence[Mapping], timeline: int = 0) -> str:
    if not recs:
        return '<p class="note">No recommendations.</p>'
    out = []
    for r in recs:
        ops = r.get("ops") or []
        items = "".join(
            f"<li>{_code(o['name']) if o.get('kind') == 'source line' else op_link(o['name'], timeline)}"
            f" <span class=\"note\">({_e(o.get('kind', ''))})</span> — {_e(o.get('detail', ''))}</li>"
            for o in ops)
        triggered = f"<div class=\"note\">Triggered by:</div><ul>{items}</ul>" if items else ""
        out.append(f'<div class="rec" data-rec="{_e(r.get("id", ""))}"><b>{_e(r["title"])}</b> — '
                   f"{_e(r['detail'])}{triggered}</div>")
    return "".join(out)


def _num(v: float, text: str) -> str:
    return f'<td class="n" data-v="{float(v):.9g}">{_e(text)}</td>'


def ops_table(ops: Sequence[Mapping], timeline: int = 0) -> str:
    if not ops:
        return '<p class="note">No ops.</p>'
    with_engines = any("engine_active_time" in r for r in ops)
    heads = ["op", "kind", "count", "total time", "average", "% of total"]
    if with_engines:
        heads += [f"{e} active" for e in ENGINE_COLUMNS] + ["DMA transfers", "DMAs < 32 KiB"]
    heads += ["model FLOPs", "bytes"]
    rows = []
    for r in ops[:MAX_OP_ROWS]:
        name = str(r.get("name"))
        cells = [f'<td data-v="{_e(name.lower())}">{op_link(name, timeline)}</td>',
                 f"<td>{_e(r.get('kind'))}</td>", _num(r.get("count", 0), str(r.get("count", 0))),
                 _num(r.get("total_time", 0), fmt_time(r.get("total_time", 0))),
                 _num(r.get("average_time", 0), fmt_time(r.get("average_time", 0))),
                 _num(r.get("total_time_percent", 0), f"{r.get('total_time_percent', 0):.1f}%")]
        if with_engines:
            eng = r.get("engine_active_time") or {}
            cells += [_num(eng.get(e, 0), fmt_time(eng[e]) if e in eng else "") for e in ENGINE_COLUMNS]
            cells += [_num(r.get("dma_transfer_count", 0), str(r.get("dma_transfer_count", ""))),
                      _num(r.get("dma_small_transfer_count", 0), str(r.get("dma_small_transfer_count", "")))]
        cells += [_num(r.get("model_flops", 0), f"{r.get('model_flops', 0):.3g}"),
                  _num(r.get("bytes", 0), fmt_bytes(r.get("bytes", 0)))]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(ops) > MAX_OP_ROWS:
        more = f'<p class="note">{len(ops) - MAX_OP_ROWS} more rows in ops.csv.</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    return (f'<p class="note">Click a column to sort, an op to find it in the timeline.</p>'
            f'<div class="table-wrap"><table class="sortable ops"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>{more}")


def fields_table(doc: Mapping) -> str:
    fields = [(k, v) for k, v in doc.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    rows = "".join(f"<tr><td>{_e(k)}</td><td class=n>{_e(format(v, '.6g') if isinstance(v, float) else v)}"
                   "</td></tr>" for k, v in fields)
    return (f"<details><summary>Show all {len(fields)} fields</summary>"
            f"<table><thead><tr><th>field</th><th>value</th></tr></thead><tbody>{rows}</tbody></table></details>")


def fallback_table(doc: Mapping) -> str:
    fallback = doc.get("fallback_ops", {})
    if not fallback:
        return '<p class="note">None.</p>'
    return ("<table><thead><tr><th>op</th><th>calls</th></tr></thead><tbody>"
            + "".join(f"<tr><td>{op_link(k)}</td><td class=n>{v}</td></tr>" for k, v in fallback.items())
            + "</tbody></table>")


def subtitle(doc: Mapping, source: str | None = None) -> str:
    kernels = ", ".join(dict.fromkeys(doc.get("kernels", [])))
    parts = [f"chip <b>{_e(doc.get('chip', '?'))}</b>", f"detail {_e(doc.get('detail', '?'))}"]
    if kernels:
        parts.append(f"kernels {_e(kernels)}")
    if source:
        parts.append(f"<code>{_e(source)}</code>")
    return " · ".join(parts)


def render_html(doc: Mapping, trace: Mapping, *, source: str | None = None) -> str:
    """The report of one profile: its summary document and its trace (``source``: where it came from)."""
    notes = "".join(f'<p class="note">note: {_e(n)}</p>' for n in doc.get("notes", []))
    stats = doc.get("trace", {})
    capped = ""
    if stats.get("aggregated"):
        instructions, ops = stats.get("aggregated_instructions", 0), stats.get("aggregated_ops", 0)
        capped = (f'<p class="note">trace.json was capped when written: {instructions:,} instructions and '
                  f'{ops:,} ops are aggregated (neuronsim profile --max-events raises the cap).</p>')
    charts_html = ('<div class="grid2"><div class="panel"><h3>Engine utilization (active time, % of the run)'
                   f"</h3>{charts.utilization_svg(doc)}</div>"
                   '<div class="panel"><h3>DMA transfer sizes</h3>'
                   f'{charts.dma_sizes_svg(doc.get("dma_sizes"))}</div></div>')
    sections = [
        ("summary", "Summary", cards(doc) + notes),
        ("recommendations", "Recommendations", recommendations_html(doc.get("recommendations", []))),
        ("timeline", "Timeline", capped + timeline_block(trace, "tl0")),
        ("charts", "Engines and DMA", charts_html),
        ("ops", "Ops", ops_table(doc.get("ops", []))),
        ("fallback", "Host fallback ops", fallback_table(doc)),
        ("fields", "All summary fields", fields_table(doc)),
    ]
    return page("neuronsim profile", subtitle(doc, source), sections)
