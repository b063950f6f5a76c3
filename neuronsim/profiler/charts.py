"""The report's charts as inline SVG: engine utilization, DMA transfer sizes, A-vs-B pairs.

Static markup (no script needed to read them); every bar has a ``<title>`` with its exact value.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
ENGINE_COLOURS = {"tensor": "#d62728", "vector": "#1f77b4", "scalar": "#2ca02c", "gpsimd": "#9467bd",
                  "sync": "#8c564b", "dma": "#ff7f0e"}
PAIR_COLOURS = ("#4e79a7", "#f28e2b")
SMALL_COLOUR, LARGE_COLOUR = "#e15759", "#4e79a7"


def _e(x) -> str:
    return html.escape(str(x))


def utilization_svg(doc: Mapping) -> str:
    """Per engine: active time as a percent of the run (Explorer's ``*_active_time_percent``)."""
    rows = [(e, doc.get(f"{e}_engine_active_time_percent", 0.0)) for e in ENGINES]
    rows.append(("dma", doc.get("dma_active_time_percent", 0.0)))
    bar = 340
    parts = [f'<svg width="{bar + 150}" height="{len(rows) * 24 + 26}" role="img" '
             f'aria-label="engine utilization" class="chart-utilization">']
    for i, (name, pct) in enumerate(rows):
        y = 4 + i * 24
        w = max(0.0, min(100.0, pct)) / 100 * bar
        parts.append(f'<text x="0" y="{y + 13}">{_e(name)}</text>'
                     f'<rect x="64" y="{y}" width="{bar}" height="16" fill="#eceff3"/>'
                     f'<rect x="64" y="{y}" width="{w:.1f}" height="16" fill="{ENGINE_COLOURS[name]}">'
                     f"<title>{_e(name)}: active {pct:.2f}% of the run</title></rect>"
                     f'<text x="{72 + bar}" y="{y + 13}">{pct:.1f}%</text>')
    axis_y = 4 + len(rows) * 24 + 12
    for pct in (0, 50, 100):
        x = 64 + pct / 100 * bar
        parts.append(f'<text x="{x - 8:.0f}" y="{axis_y}">{pct}%</text>')
    parts.append("</svg>")
    return "".join(parts)


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    mag = 10 ** len(str(int(v))) / 10
    for m in (1, 2, 5, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag


def _short_labels(edges) -> list[str]:
    def short(n: int) -> str:
        return f"{n // (1 << 20)}M" if n >= 1 << 20 else f"{n // 1024}K" if n >= 1024 else str(n)

    out = [f"<{short(edges[0])}"] if edges else []
    out += [f"{short(lo)}–{short(hi)}" for lo, hi in zip(edges, edges[1:], strict=False)]
    return out + [f"≥{short(edges[-1])}"] if edges else out


def dma_sizes_svg(sizes: Mapping | None) -> str:
    """Transfers per size bucket; buckets below Explorer's 32 KiB target in red."""
    if not sizes or not sum(sizes.get("count", [])):
        return '<p class="note">No DMA transfers.</p>'
    labels, counts, nbytes = sizes["labels"], sizes["count"], sizes["bytes"]
    small = sizes.get("small_below_bytes", 0)
    edges = list(sizes.get("edges_bytes", [])) + [float("inf")]
    short = _short_labels(sizes.get("edges_bytes", []))
    top = _nice_max(max(counts))
    width, height, left, bottom = 70 * len(labels) + 60, 210, 50, 170
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="DMA transfer sizes" '
             f'class="chart-dma-sizes">',
             '<text x="0" y="12">transfers</text>']
    for frac in (0, 0.5, 1):
        y = bottom - frac * (bottom - 24)
        parts.append(f'<line x1="{left}" x2="{width}" y1="{y:.0f}" y2="{y:.0f}" stroke="#e3e6ea"/>'
                     f'<text x="{left - 6}" y="{y + 4:.0f}" text-anchor="end">{top * frac:g}</text>')
    for i, (label, n, b) in enumerate(zip(labels, counts, nbytes, strict=True)):
        x = left + 8 + i * 70
        h = n / top * (bottom - 24)
        colour = SMALL_COLOUR if edges[i] <= small else LARGE_COLOUR
        parts.append(f'<rect x="{x}" y="{bottom - h:.1f}" width="54" height="{h:.1f}" fill="{colour}">'
                     f"<title>{_e(label)}: {n} transfers, {b} bytes</title></rect>"
                     f'<text x="{x + 27}" y="{bottom - h - 4:.1f}" text-anchor="middle">{n}</text>'
                     f'<text x="{x + 27}" y="{bottom + 16}" text-anchor="middle">{_e(short[i])}</text>')
    parts.append(f'<text x="{left}" y="{bottom + 36}">bytes per transfer; red: below {small // 1024} KiB, '
                 f"where the fixed cost per transfer dominates</text></svg>")
    return "".join(parts)


def paired_bars_svg(labels: Sequence[str], a: Sequence[float], b: Sequence[float], names: Sequence[str],
                    fmt: Callable[[float], str], title: str) -> str:
    """Horizontal bars, A above B per label, on one scale."""
    top = max([*a, *b, 0.0]) or 1.0
    bar, row = 320, 34
    parts = [f'<svg width="{bar + 260}" height="{len(labels) * row + 30}" role="img" '
             f'aria-label="{_e(title)}">']
    for k, (name, colour) in enumerate(zip(names, PAIR_COLOURS, strict=False)):
        parts.append(f'<rect x="{110 + k * 170}" y="2" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{124 + k * 170}" y="11">{_e(name)}</text>')
    for i, label in enumerate(labels):
        y = 22 + i * row
        parts.append(f'<text x="0" y="{y + 15}">{_e(label)}</text>')
        for k, (v, colour) in enumerate(((a[i], PAIR_COLOURS[0]), (b[i], PAIR_COLOURS[1]))):
            w = v / top * bar
            parts.append(f'<rect x="100" y="{y + k * 13}" width="{w:.1f}" height="12" fill="{colour}">'
                         f"<title>{_e(label)} ({_e(names[k])}): {_e(fmt(v))}</title></rect>"
                         f'<text x="{106 + w:.1f}" y="{y + 10 + k * 13}">{_e(fmt(v))}</text>')
    parts.append("</svg>")
    return "".join(parts)
