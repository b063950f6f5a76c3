"""``neuronsim profile --chip trn2,trn3``: the script profiled once per chip, then compared.

Each chip runs in its own process (``neuronsim profile --chip X -o DIR/X``): the device and its chip
are fixed when a process first imports torch, and two runs must not share a process's state. The
profiles are then compared as ``neuronsim compare`` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from neuronsim.cli.app import Abort, app


def chip_dir_name(chip: str) -> str:
    """trn2 -> trn2; a chip file's directory is named after the file (my_chip.toml -> my_chip)."""
    return Path(chip).stem if chip.endswith(".toml") else chip


def profile_chips(chips: str, out_dir: str, options: dict, as_json: bool, script: str, args) -> int:
    from neuronsim.errors import ChipSpecError
    from neuronsim.sim.chips import get_chip

    names = [c.strip() for c in chips.split(",") if c.strip()]
    dirs = [chip_dir_name(c) for c in names]
    if len(names) < 2 or len(set(dirs)) != len(dirs):
        raise Abort(f"--chip {chips!r}: give two or more different chips, comma-separated (e.g. trn2,trn3)")
    for c in names:
        try:
            get_chip(c)
        except ChipSpecError as exc:
            raise Abort(str(exc)) from None
    out = Path(out_dir)
    codes = []
    for chip, sub in zip(names, dirs, strict=True):
        app.err.print(f"[bold]neuronsim profile --chip {chip}[/bold] → {out / sub}")
        codes.append(subprocess.call(_command(chip, out / sub, options, script, args)))
    failed = [(c, code) for c, code in zip(names, codes, strict=True) if code]
    missing = [d for d in dirs if not (out / d / "summary.json").exists()]
    if missing:
        raise Abort(f"no profile was written for {', '.join(missing)} (exit codes: "
                    f"{', '.join(f'{c} {code}' for c, code in zip(names, codes, strict=True))})")
    _compare_all(out, names, dirs, options["html"], as_json)
    return failed[0][1] if failed else 0


def _command(chip: str, out: Path, options: dict, script: str, args) -> list[str]:
    cmd = [sys.executable, "-m", "neuronsim.cli.main", "profile", "--chip", chip, "-o", str(out),
           "--numerics", options["numerics"], "--detail", options["detail"],
           "--max-events", str(options["max_events"]), "--no-summary",
           "--host-ops" if options["host_ops"] else "--no-host-ops"]
    if options["torch_profiler"]:
        cmd.append("--torch-profiler")
    if options["html"]:
        cmd.append("--html")
    return [*cmd, script, *args]


def _compare_all(out: Path, names: list[str], dirs: list[str], html: bool, as_json: bool) -> None:
    """The first chip against each other one (two chips: one comparison, DIR/compare.json)."""
    from neuronsim.cli.compare import load_and_compare, write_compare_html
    from neuronsim.cli.render import render_comparison
    from neuronsim.profiler.compare import write_comparison
    from neuronsim.profiler.report import REPORT_FILE

    results = []
    for k in range(1, len(dirs)):
        suffix = "" if len(dirs) == 2 else f"-{dirs[0]}-{dirs[k]}"
        comparison, docs = load_and_compare(str(out / dirs[0]), str(out / dirs[k]))
        files = {"comparison": str(out / f"compare{suffix}.json")}
        write_comparison(files["comparison"], comparison)
        if html:
            target = out / (REPORT_FILE if not suffix else f"report{suffix}.html")
            write_compare_html(target, comparison, str(out / dirs[0]), str(out / dirs[k]), docs)
            files["report"] = str(target)
        results.append(comparison)
        if not as_json:
            render_comparison(comparison, app.console, files=files)
    if as_json:
        app.print_json(results[0] if len(results) == 1 else results)
