"""``neuronsim compare A B``: two profile directories side by side, with their deltas."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("dir_a", type=click.Path(exists=True, file_okay=False))
@click.argument("dir_b", type=click.Path(exists=True, file_okay=False))
@click.option("--html", "html_path", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Also write a self-contained HTML report (default DIR_B/../compare.html).")
@click.option("--top", default=15, show_default=True, type=click.IntRange(min=1),
              help="Ops shown in the terminal, largest change first (--json has them all).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of tables.")
def compare(dir_a: str, dir_b: str, html_path: str | None, top: int, as_json: bool) -> int:
    """Compare two profiles side by side: summary, engines and ops, B against A.

    DIR_A and DIR_B are directories written by `neuronsim profile`; the comparison is printed as
    tables (--json: as JSON) and, with --html, written as a report with both timelines.

    \b
      neuronsim profile --chip trn2 -o gpt-trn2 examples/train_gpt.py
      neuronsim profile --chip trn3 -o gpt-trn3 examples/train_gpt.py
      neuronsim compare gpt-trn2 gpt-trn3 --html
    """
    from neuronsim.cli.app import app

    comparison, sides = load_and_compare(dir_a, dir_b)
    files = {}
    if html_path is not None:
        target = Path(html_path) if html_path else Path(dir_b).resolve().parent / "compare.html"
        write_compare_html(target, comparison, dir_a, dir_b, sides)
        files["report"] = str(target)
    if as_json:
        app.print_json(comparison)
    else:
        from neuronsim.cli.render import render_comparison

        render_comparison(comparison, app.console, top, files)
    return 0


def load_and_compare(dir_a: str, dir_b: str) -> tuple[dict, tuple[dict, dict]]:
    """The comparison of two profile directories, and their summary documents."""
    import json

    from neuronsim.cli.app import Abort
    from neuronsim.profiler import report
    from neuronsim.profiler.compare import compare_profiles, side_names

    docs = []
    for d in (dir_a, dir_b):
        try:
            docs.append(report.load_summary(d))
        except (OSError, json.JSONDecodeError) as exc:
            message = f"{d} is not a profile directory: cannot read {report.SUMMARY_FILE} ({exc})"
            raise Abort(message) from None
    names = side_names(docs[0], docs[1], dir_a, dir_b)
    return compare_profiles(docs[0], docs[1], names, (str(dir_a), str(dir_b))), (docs[0], docs[1])


def write_compare_html(target: Path, comparison: dict, dir_a: str, dir_b: str,
                       docs: tuple[dict, dict]) -> None:
    import json

    from neuronsim.cli.app import Abort
    from neuronsim.profiler import report
    from neuronsim.profiler.compare_html import render_compare_html
    from neuronsim.profiler.trace import load_trace

    traces = []
    for d in (dir_a, dir_b):
        try:
            traces.append(load_trace(Path(d) / report.TRACE_FILE))
        except (OSError, json.JSONDecodeError) as exc:
            raise Abort(f"cannot read {Path(d) / report.TRACE_FILE} ({exc})") from None
    target.write_text(render_compare_html(comparison, (docs[0], traces[0]), (docs[1], traces[1])))
