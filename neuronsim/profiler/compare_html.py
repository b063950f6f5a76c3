"""The HTML report of a comparison (``neuronsim compare``): one self-contained file, like the
profile report — side-by-side summary, engine and op deltas, both sides' recommendations, DMA
sizes, and both device timelines on the simulated clock, their zoom linked."""

from __future__ import annotations

import html
from collections.abc import Mapping

from neuronsim.profiler import charts
from neuronsim.profiler.html import op_link, page, recommendations_html, timeline_block
from neuronsim.profiler.units import fmt_bytes, fmt_delta_percent, fmt_time

MAX_OP_ROWS = 2000


def _e(x) -> str:
    return html.escape(str(x))


def fmt_value(kind: str, v: float) -> str:
    if kind == "time":
        return fmt_time(v)
    if kind == "bytes":
        return fmt_bytes(v)
    if kind == "percent":
        return f"{v:.2f}%"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.4g}"


def _num(v: float, text: str, cls: str = "") -> str:
    return f'<td class="n {cls}" data-v="{float(v):.9g}">{_e(text)}</td>'


def _change_class(row: Mapping, lower_is_better: bool = True) -> str:
    if row["delta"] == 0 or (row["a"] and abs(row["delta"] / row["a"]) < 5e-4):
        return ""
    worse = row["delta"] > 0 if lower_is_better else row["delta"] < 0
    return "up" if worse else "down"


def _table(cls: str, heads: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    body = "".join(rows)
    return f'<table class="sortable {cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _ratio(r: Mapping) -> str:
    return _num(r["ratio"] or 0, f"{r['ratio']:.3f}×" if r["ratio"] is not None else "")


def _pair(a, b) -> str:
    return f'<div class="grid2">{a}{b}</div>'


def summary_table(cmp: Mapping) -> str:
    a, b = cmp["a"]["name"], cmp["b"]["name"]
    higher_better = {"mfu_estimated_percent", "hfu_estimated_percent"}
    rows = []
    for r in cmp["summary"]:
        kind = r["kind"]
        cls = ""
        if r["field"] in higher_better:
            cls = _change_class(r, lower_is_better=False)
        elif kind == "time":
            cls = _change_class(r)
        rows.append(f"<tr><td>{_e(r['field'])}</td>{_num(r['a'], fmt_value(kind, r['a']))}"
                    f"{_num(r['b'], fmt_value(kind, r['b']))}"
                    f"{_num(r['delta'], fmt_delta_percent(r['a'], r['b']), cls)}{_ratio(r)}</tr>")
    return _table("compare-summary", ["field", a, b, f"{b} vs {a}", f"{b} / {a}"], rows)


def engines_html(cmp: Mapping) -> str:
    a, b = cmp["a"]["name"], cmp["b"]["name"]
    eng = cmp["engines"]
    chart = charts.paired_bars_svg([r["engine"] for r in eng], [r["a"] for r in eng], [r["b"] for r in eng],
                                   (a, b), fmt_time, "engine active time")
    rows = []
    for r in eng:
        a_pct, b_pct = f"{r['a_percent']:.1f}%", f"{r['b_percent']:.1f}%"
        rows.append(f"<tr><td>{_e(r['engine'])}</td>{_num(r['a'], fmt_time(r['a']))}"
                    f"{_num(r['b'], fmt_time(r['b']))}"
                    f"{_num(r['delta'], fmt_delta_percent(r['a'], r['b']), _change_class(r))}"
                    f"{_num(r['a_percent'], a_pct)}{_num(r['b_percent'], b_pct)}</tr>")
    table = _table("compare-engines", ["engine", f"{a} active", f"{b} active", "change", f"{a} % of run",
                                       f"{b} % of run"], rows)
    return _pair(f'<div class="panel">{chart}</div>', f'<div class="panel">{table}</div>')


def ops_html(cmp: Mapping) -> str:
    a, b = cmp["a"]["name"], cmp["b"]["name"]
    rows = []
    for r in cmp["ops"][:MAX_OP_ROWS]:
        rows.append(f'<tr><td data-v="{_e(r["name"].lower())}">{op_link(r["name"], "all")}'
                    f"</td><td>{_e(r['kind'])}</td>{_num(r['a_count'], str(r['a_count']))}"
                    f"{_num(r['b_count'], str(r['b_count']))}{_num(r['a'], fmt_time(r['a']))}"
                    f"{_num(r['b'], fmt_time(r['b']))}"
                    f"{_num(r['delta'], fmt_time(r['delta']), _change_class(r))}{_ratio(r)}</tr>")
    more = (f'<p class="note">{len(cmp["ops"]) - MAX_OP_ROWS} more ops in the --json output.</p>'
            if len(cmp["ops"]) > MAX_OP_ROWS else "")
    heads = ["op", "kind", f"{a} calls", f"{b} calls", f"{a} time", f"{b} time", "change", f"{b} / {a}"]
    table = _table("compare-ops", heads, rows)
    return ('<p class="note">Largest changes first; click a column to sort, an op to find it in the '
            f'timelines.</p><div class="table-wrap">{table}</div>{more}')


def _card(value: str, key: str) -> str:
    return f'<div class="card"><div class="v">{_e(value)}</div><div class="k">{_e(key)}</div></div>'


def render_compare_html(cmp: Mapping, a: tuple[Mapping, Mapping], b: tuple[Mapping, Mapping]) -> str:
    """The comparison report: ``cmp`` from :func:`~neuronsim.profiler.compare.compare_profiles`, and
    each side's (summary document, trace)."""
    (doc_a, trace_a), (doc_b, trace_b) = a, b
    na, nb = cmp["a"]["name"], cmp["b"]["name"]
    total = next(r for r in cmp["summary"] if r["field"] == "total_time")
    headline = ('<div class="cards">' + _card(fmt_time(total["a"]), f"{na} total_time")
                + _card(fmt_time(total["b"]), f"{nb} total_time")
                + _card(fmt_delta_percent(total["a"], total["b"]), f"{nb} vs {na}") + "</div>")
    recs = _pair(f'<div><h3>{_e(na)}</h3>{recommendations_html(doc_a.get("recommendations", []), 0)}</div>',
                 f'<div><h3>{_e(nb)}</h3>{recommendations_html(doc_b.get("recommendations", []), 1)}</div>')
    dma = _pair(f'<div class="panel"><h3>{_e(na)}</h3>{charts.dma_sizes_svg(doc_a.get("dma_sizes"))}</div>',
                f'<div class="panel"><h3>{_e(nb)}</h3>{charts.dma_sizes_svg(doc_b.get("dma_sizes"))}</div>')
    timelines = ('<label><input type="checkbox" data-link-timelines checked> link zoom (both from their '
                 'first device op)</label>' + timeline_block(trace_a, "tla", f"{na}: ", host=False)
                 + timeline_block(trace_b, "tlb", f"{nb}: ", host=False))
    sources = " · ".join(f"{_e(s['name'])}: <code>{_e(s['source'])}</code>"
                         for s in (cmp["a"], cmp["b"]) if s["source"])
    sections = [
        ("summary", "Summary", headline + summary_table(cmp)),
        ("engines", "Engines", engines_html(cmp)),
        ("ops", "Ops", ops_html(cmp)),
        ("recommendations", "Recommendations", recs),
        ("dma", "DMA transfer sizes", dma),
        ("timelines", "Timelines", timelines),
    ]
    return page(f"neuronsim compare: {na} vs {nb}", sources or f"{_e(na)} vs {_e(nb)}", sections)
