"""The rich rendering of a profile summary (``profile`` and ``view`` print it)."""

from __future__ import annotations

from collections.abc import Mapping

from neuronsim.profiler.units import fmt_bytes, fmt_time

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
TOP_OPS = 10


def _bar(pct: float, width: int = 30) -> str:
    filled = round(max(0.0, min(100.0, pct)) / 100 * width)
    return "█" * filled + "·" * (width - filled)


def render_summary(doc: Mapping, console, files: Mapping[str, str] | None = None) -> None:
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("total_time", fmt_time(doc.get("total_time", 0))),
        ("mfu_estimated_percent", f"{doc.get('mfu_estimated_percent', 0):.2f}%"),
        (
            "model_flops / hardware_flops",
            f"{doc.get('model_flops', 0):.4g} / {doc.get('hardware_flops', 0):.4g}",
        ),
        (
            "hbm_read_bytes / hbm_write_bytes",
            f"{fmt_bytes(doc.get('hbm_read_bytes', 0))} / {fmt_bytes(doc.get('hbm_write_bytes', 0))}",
        ),
        (
            "dma_transfer_count / average",
            f"{doc.get('dma_transfer_count', 0)} / {fmt_bytes(doc.get('dma_transfer_average_bytes', 0))}",
        ),
        (
            "sbuf_peak_bytes / psum_peak_bytes",
            f"{fmt_bytes(doc.get('sbuf_peak_bytes', 0))} / {fmt_bytes(doc.get('psum_peak_bytes', 0))}",
        ),
        (
            "host_fallback_time",
            f"{fmt_time(doc.get('host_fallback_time', 0))} "
            f"({doc.get('host_fallback_time_percent', 0):.1f}%, "
            f"{doc.get('host_fallback_count', 0)} calls)",
        ),
    ]
    for k, v in rows:
        head.add_row(k, v)
    console.print(
        Panel(
            head,
            title=f"neuronsim profile — {doc.get('chip', '?')}, {doc.get('detail', '?')} detail",
            title_align="left",
        )
    )
    util = Table(title="Engine active time", title_justify="left", show_edge=False)
    for col in ("engine", "active", "%", "", "instructions"):
        util.add_column(col, justify="right" if col in ("active", "%", "instructions") else "left")
    for e in ENGINES:
        pct = doc.get(f"{e}_engine_active_time_percent", 0.0)
        util.add_row(
            e,
            fmt_time(doc.get(f"{e}_engine_active_time", 0)),
            f"{pct:.1f}",
            _bar(pct),
            str(doc.get(f"{e}_engine_instruction_count", 0)),
        )
    pct = doc.get("dma_active_time_percent", 0.0)
    util.add_row(
        "dma",
        fmt_time(doc.get("dma_active_time", 0)),
        f"{pct:.1f}",
        _bar(pct),
        str(doc.get("dma_transfer_count", 0)),
    )
    console.print(util)
    ops = list(doc.get("ops", []))
    if ops:
        table = Table(title=f"Top ops ({len(ops)} in ops.csv)", title_justify="left", show_edge=False)
        for col in ("name", "kind", "count", "total", "%"):
            table.add_column(
                col, justify="right" if col in ("count", "total", "%") else "left", overflow="fold"
            )
        for r in ops[:TOP_OPS]:
            table.add_row(
                escape(str(r["name"])),
                str(r["kind"]),
                str(r["count"]),
                fmt_time(r["total_time"]),
                f"{r.get('total_time_percent', 0):.1f}",
            )
        console.print(table)
    fallback = doc.get("fallback_ops", {})
    if fallback:
        shown = ", ".join(f"{escape(k)} ×{v}" for k, v in list(fallback.items())[:8])
        console.print(f"[bold]Host fallback ops:[/bold] {shown}{' …' if len(fallback) > 8 else ''}")
    for r in doc.get("recommendations", []):
        console.print(
            Panel(escape(r["detail"]), title=escape(r["title"]), title_align="left", border_style="yellow")
        )
    stats = doc.get("trace", {})
    if stats.get("aggregated"):
        console.print(
            f"[yellow]trace capped:[/yellow] {stats.get('aggregated_instructions', 0)} instructions "
            f"and {stats.get('aggregated_ops', 0)} ops aggregated (cap {stats.get('max_instruction_events')} "
            f"instruction events, {stats.get('max_op_events')} op events)"
        )
    for note in doc.get("notes", []):
        console.print(f"[dim]note: {escape(note)}[/dim]")
    for what, path in (files or {}).items():
        console.print(f"{what}: {escape(path)}")


def _value(kind: str, v: float) -> str:
    if kind == "time":
        return fmt_time(v)
    if kind == "bytes":
        return fmt_bytes(v)
    if kind == "percent":
        return f"{v:.2f}%"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.4g}"


def _ratio(r: Mapping) -> str:
    return f"{r['ratio']:.3f}" if r.get("ratio") is not None else "—"


def render_comparison(cmp: Mapping, console, top: int = 15, files: Mapping[str, str] | None = None) -> None:
    """``neuronsim compare``: summary, engines and the ops that changed most, B against A."""
    from rich.markup import escape
    from rich.table import Table

    from neuronsim.profiler.units import fmt_delta_percent

    a, b = escape(str(cmp["a"]["name"])), escape(str(cmp["b"]["name"]))
    summary = Table(title=f"neuronsim compare — {a} vs {b}", title_justify="left", show_edge=False)
    for col in ("field", a, b, "change", f"{b}/{a}"):
        summary.add_column(col, justify="left" if col == "field" else "right")
    for r in cmp["summary"]:
        summary.add_row(r["field"], _value(r["kind"], r["a"]), _value(r["kind"], r["b"]),
                        fmt_delta_percent(r["a"], r["b"]), _ratio(r))
    console.print(summary)
    engines = Table(title="Engine active time", title_justify="left", show_edge=False)
    for col in ("engine", a, b, "change", f"{a} %", f"{b} %"):
        engines.add_column(col, justify="left" if col == "engine" else "right")
    for r in cmp["engines"]:
        engines.add_row(r["engine"], fmt_time(r["a"]), fmt_time(r["b"]), fmt_delta_percent(r["a"], r["b"]),
                        f"{r['a_percent']:.1f}", f"{r['b_percent']:.1f}")
    console.print(engines)
    ops = list(cmp["ops"])
    if ops:
        title = f"Ops, largest change first ({min(top, len(ops))} of {len(ops)})"
        table = Table(title=title, title_justify="left", show_edge=False)
        for col in ("op", "kind", f"{a} calls", f"{b} calls", a, b, "change", f"{b}/{a}"):
            table.add_column(col, justify="left" if col in ("op", "kind") else "right", overflow="fold")
        for r in ops[:top]:
            table.add_row(escape(str(r["name"])), str(r["kind"]), str(r["a_count"]), str(r["b_count"]),
                          fmt_time(r["a"]), fmt_time(r["b"]), fmt_delta_percent(r["a"], r["b"]), _ratio(r))
        console.print(table)
    for what, path in (files or {}).items():
        console.print(f"{what}: {escape(path)}")
