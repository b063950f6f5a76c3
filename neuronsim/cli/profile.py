"""``neuronsim profile``: run a script on the emulated device and write its profile."""

from __future__ import annotations

import gc

import click

from neuronsim import env
from neuronsim.cli.options import SCRIPT_CONTEXT, chips_option, numerics_option, script_arguments

HELP = f"""Run SCRIPT on the emulated device (as `neuronsim run`, {env.NEURON_SIM}=1) and profile it.

Writes DIR/trace.json (Chrome/Perfetto trace: a host track, device ops on the device track and,
with --detail instruction, one track per engine and DMA queue), DIR/summary.json (Neuron
Explorer's field names and units), DIR/ops.csv (the op table), and prints a summary with
recommendations. nki.simulate launches in the script are profiled too: a file of NKI kernels is
run as `python FILE` runs it (its __main__ calls the kernels, as AWS's samples do). Arguments after
SCRIPT go to the script; the exit code is the script's.

With --chip trn2,trn3 (several chips, comma-separated) the script runs once per chip, each
profile in DIR/<chip>/, and the profiles are compared as `neuronsim compare` does
(DIR/compare.json; with --html, DIR/report.html shows both).
"""


@click.command(context_settings=SCRIPT_CONTEXT, help=HELP)
@click.option(
    "-o",
    "--output",
    "out_dir",
    default="neuronsim-profile",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory to write the profile to.",
)
@chips_option
@numerics_option
@click.option(
    "--detail",
    type=click.Choice(["op", "instruction"]),
    default="op",
    show_default=True,
    help="op: one slice per device op; instruction: also every engine instruction.",
)
@click.option(
    "--max-events",
    default=200_000,
    show_default=True,
    type=click.IntRange(min=100),
    help="Instruction (and op) events kept in the trace; past it they are aggregated.",
)
@click.option(
    "--host-ops/--no-host-ops",
    default=True,
    show_default=True,
    help="Draw a host track: the host time up to each device op, from the times the device "
    "stamps on the ops it is given (no profiler callbacks: the script runs at full speed).",
)
@click.option(
    "--torch-profiler",
    is_flag=True,
    help="Record the host track with torch.profiler instead: every ATen op, CPU ones and nested "
    "ones too (costs time per op: tens of percent on scripts of many small ops; not with a "
    "script that runs its own torch.profiler).",
)
@click.option("--html", is_flag=True,
              help="Also write DIR/report.html: one self-contained file with a zoomable timeline, charts and "
              "the op table (open it in a browser).")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the summary table.")
@click.option("--summary/--no-summary", "show_summary", default=True, hidden=True,
              help="Print the summary (the --chip A,B form runs each chip without).")
@script_arguments
def profile(
    out_dir: str,
    chip: str,
    numerics: str,
    detail: str,
    max_events: int,
    host_ops: bool,
    torch_profiler: bool,
    html: bool,
    as_json: bool,
    show_summary: bool,
    script: str,
    args: tuple[str, ...],
) -> int:
    if "," in chip:
        from neuronsim.cli.profile_chips import profile_chips

        options = {"numerics": numerics, "detail": detail, "max_events": max_events, "host_ops": host_ops,
                   "torch_profiler": torch_profiler, "html": html}
        return profile_chips(chip, out_dir, options, as_json, script, args)
    from neuronsim.cli.script import enable_device_environment

    enable_device_environment(chip, numerics)
    from neuronsim.cli.app import Abort, app
    from neuronsim.errors import ChipSpecError
    from neuronsim.profiler import session
    from neuronsim.sim.chips import get_chip

    try:
        spec = get_chip(chip)
    except ChipSpecError as exc:
        raise Abort(str(exc)) from None
    recording = session.start(detail)
    code, host_text = _run_recorded(script, args, host_ops and torch_profiler, max_events, recording)
    session.stop()
    # Writing builds many small objects over a heap the script left large (traced Programs,
    # profiler results): full GC passes there would cost more than the writing itself.
    gc.disable()
    try:
        files, doc = _write(recording, session, host_text, host_ops, spec, max_events, out_dir, html)
    finally:
        gc.enable()
    if as_json:
        app.print_json(doc)
    elif show_summary:
        from neuronsim.cli.render import render_summary

        render_summary(doc, app.console, files)
    return code


def _write(recording, session, host_text, host_ops: bool, spec, max_events: int, out_dir: str, html: bool):
    """Build and write the profile. The host track is torch.profiler's (``host_text``) when it
    recorded, else the one drawn from the device ops' issue times (``host_ops``), else none."""
    from neuronsim.cli.app import app
    from neuronsim.profiler import report

    with app.status("writing the profile"):
        from neuronsim.profiler import lane

        if host_text:
            base = lane.trace_base_ns(host_text)
        else:
            base = recording.started_wall_ns if host_ops else None
        doc, device_trace = report.session_profile(
            recording, session.device_events(), spec, host_base_ns=base, max_instruction_events=max_events,
            max_op_events=max_events, host_lane=host_ops and not host_text)
        trace = lane.merge_trace_text(host_text, device_trace) if host_text else device_trace
        out = report.write_profile(out_dir, doc, trace)
        files = {"trace": str(out / report.TRACE_FILE), "summary": str(out / report.SUMMARY_FILE),
                 "ops": str(out / report.OPS_FILE)}
        if html:
            import json

            from neuronsim.profiler.html import render_html

            full = json.loads(trace) if isinstance(trace, str) else trace
            (out / report.REPORT_FILE).write_text(render_html(doc, full, source=out_dir))
            files["report"] = str(out / report.REPORT_FILE)
    return files, doc


def _run_recorded(script: str, args, torch_profiler: bool, max_events: int,
                  recording) -> tuple[int, str | None]:
    """Run the script, under torch.profiler (CPU activity) when asked and torch is there; return
    its exit code and torch.profiler's trace as JSON text (first ``max_events`` host slices)."""
    from neuronsim.cli.script import run_script

    torch = None
    if torch_profiler:
        try:
            import torch
        except ImportError:
            recording.notes.append("host ops: torch is not installed")
    if torch is None:
        return run_script(script, args), None
    import os
    import tempfile

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from neuronsim.profiler.lane import count_slices

    prof = torch_profile(activities=[ProfilerActivity.CPU])
    prof.start()
    try:
        code = run_script(script, args)
    finally:
        prof.stop()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            text = f.read()
    finally:
        os.unlink(path)
    n = count_slices(text)
    if n > max_events:  # the slow path: parse, keep the first slices, write back
        import json

        host = json.loads(text)
        slices = [i for i, e in enumerate(host["traceEvents"]) if e.get("ph") == "X"]
        drop = set(slices[max_events:])
        host["traceEvents"] = [e for i, e in enumerate(host["traceEvents"]) if i not in drop]
        text = json.dumps(host)
        recording.notes.append(f"host ops: kept the first {max_events} of {n} host slices")
    return code, text
