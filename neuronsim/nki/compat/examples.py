"""Running kernel example scripts unchanged: each file's own ``__main__`` (its numpy check) with
``import nki`` resolved to neuronsim, recording every kernel launch's simulated time.

A file is an example when it imports ``nki`` or the legacy ``neuronxcc.nki`` (run by the legacy
frontend, ``neuronsim/nki/legacy``). Its run counts as correct when it exits cleanly and prints no
mismatch (the SDK's examples print "NKI and NumPy match" or ``matches? True`` and assert). Files
whose main needs a framework neuronsim does not provide (``torch_xla``, ``jax``) are reported as
such, not as kernel failures.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

_CURRENT_API = re.compile(r"^\s*(import nki\b|from nki(\.\w+)* import)", re.M)
_LEGACY_API = re.compile(r"^\s*(import neuronxcc|from neuronxcc)", re.M)
_MISMATCH = re.compile(r"\b(differ|mismatch|do not match|don't match|matches\? False|is close\W*False)\b",
                       re.I)
_FRAMEWORKS = ("torch_xla", "jax")


def find_examples(root: Path) -> list[Path]:
    """The ``.py`` files under ``root`` written against the NKI API (current or legacy)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(errors="replace")
        if _CURRENT_API.search(text) or _LEGACY_API.search(text):
            found.append(path)
    return found


def run_example(path: Path, chip: str, timeout: float = 900.0, in_process: bool = False,
                call: str | None = None, path_extra: list | None = None) -> dict:
    """Run ``path`` as ``__main__`` on ``chip`` — or, with ``call``, run it as a module and then
    evaluate the expression ``call`` in its namespace (a test function of the file, e.g.
    ``test_attn_tutorial("accuracy", attn_fwd_v3)``); the row: ran, correct, seconds, first error,
    and ``kernels``, each launched kernel's name and simulated seconds (its last launch)."""
    if in_process:
        return _run_here(path, chip, call)
    env = dict(os.environ, NEURON_SIM="1", NEURON_SIM_CHIP=chip)
    if path_extra:  # e.g. a repository's src/ folder, as its README asks for its tests
        paths = [*map(str, path_extra), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    cmd = [sys.executable, "-m", "neuronsim.nki.compat.examples", str(path), chip, *([call] if call else [])]
    try:
        res = subprocess.run(cmd, env=env, cwd=path.parent, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ran": False, "correct": False, "seconds": None, "launches": 0,
                "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("@@compat ")]
    if not lines:
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"ran": False, "correct": False, "seconds": None, "launches": 0, "error": tail[:300]}
    return json.loads(lines[-1][len("@@compat "):])


def _run_here(path: Path, chip: str, call: str | None = None) -> dict:
    """Run the file in this process (alias, chip and launch recording undone afterwards)."""
    from neuronsim.nki import launch
    from neuronsim.nki.profile import layout
    from neuronsim.nki_alias import install_alias
    from neuronsim.options import options as sim_options

    launches: list[float] = []
    kernels: dict[str, float] = {}
    record = launch.record_launch

    def recording(traced, runs, issued):
        placed = layout(runs, traced.chip)
        launches.append(max((off + r.timeline.total_ns for *_, off, r in placed), default=0.0) * 1e-9)
        kernels[traced.name] = launches[-1]
        return record(traced, runs, issued)

    saved_path, saved_meta, saved_mods = list(sys.path), list(sys.meta_path), set(sys.modules)
    saved_argv, saved_cwd = list(sys.argv), os.getcwd()
    out = io.StringIO()
    row = {"ran": False, "correct": False, "seconds": None, "launches": 0, "error": ""}
    try:
        install_alias(force=True)
        launch.record_launch = recording
        sys.path.insert(0, str(path.parent))
        sys.argv = [str(path)]
        os.chdir(path.parent)
        with sim_options(chip=chip), contextlib.redirect_stdout(out):
            if call is None:
                runpy.run_path(str(path), run_name="__main__")
            else:
                namespace = runpy.run_path(str(path), run_name=path.stem)
                eval(call, namespace)  # noqa: S307 (a call the runner's caller names, in the file)
        row["ran"] = True
    except SystemExit as exc:
        row["ran"] = exc.code in (0, None)
        if not row["ran"]:
            row["error"] = f"SystemExit: {exc.code}"
    except Exception as exc:  # the table's "first error": whatever stopped the example
        row["error"] = _describe(exc)
    finally:
        launch.record_launch = record
        sys.path[:], sys.meta_path[:], sys.argv = saved_path, saved_meta, saved_argv
        os.chdir(saved_cwd)
        for name in set(sys.modules) - saved_mods:
            if name == "nki" or name.startswith("nki.") or not hasattr(sys.modules[name], "__file__") \
                    or str(getattr(sys.modules[name], "__file__", "")).startswith(str(path.parent)):
                sys.modules.pop(name, None)
    mismatch = _MISMATCH.search(out.getvalue())
    row["launches"] = len(launches)
    row["kernels"] = kernels
    row["seconds"] = sum(launches) if launches else None
    row["correct"] = row["ran"] and mismatch is None and bool(launches)
    if row["ran"] and mismatch is not None:
        row["error"] = f"the example reports: {mismatch.group(0)}"
    elif row["ran"] and not launches:
        row["error"] = "no kernel launched (a file of kernels: its main is a framework script)"
    return row


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in _FRAMEWORKS:
        return f"needs {exc.name} (its main runs on a framework device; not an NKI failure)"
    loc = getattr(exc, "location", None)
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return text if not loc or loc in text else f"{loc}: {text}"


def main(argv: list[str]) -> int:
    """``python -m neuronsim.nki.compat.examples FILE CHIP``: one example in a fresh process."""
    path, chip = Path(argv[0]).resolve(), argv[1]
    row = _run_here(path, chip, argv[2] if len(argv) > 2 else None)
    print("@@compat " + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
