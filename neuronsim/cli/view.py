"""``neuronsim view``: show a profile directory again, or write its HTML report."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("profile_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--html",
    "html_path",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FILE]",
    help="Write a self-contained HTML report (default DIR/report.html).",
)
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the summary table.")
def view(profile_dir: str, html_path: str | None, as_json: bool) -> int:
    """Show the profile in PROFILE_DIR (written by `neuronsim profile`)."""
    import json

    from neuronsim.cli.app import Abort, app
    from neuronsim.profiler import report

    root = Path(profile_dir)
    try:
        doc = report.load_summary(root)
    except (OSError, json.JSONDecodeError) as exc:
        raise Abort(f"{root} is not a profile directory: cannot read {report.SUMMARY_FILE} ({exc})") from None
    files = {}
    if html_path is not None:
        from neuronsim.profiler.html import render_html
        from neuronsim.profiler.trace import load_trace

        try:
            trace = load_trace(root / report.TRACE_FILE)
        except (OSError, json.JSONDecodeError) as exc:
            raise Abort(f"cannot read {root / report.TRACE_FILE} ({exc})") from None
        target = Path(html_path) if html_path else root / report.REPORT_FILE
        target.write_text(render_html(doc, trace, source=str(root)))
        files["report"] = str(target)
    if as_json:
        app.print_json(doc)
    else:
        from neuronsim.cli.render import render_summary

        render_summary(doc, app.console, files)
    return 0
