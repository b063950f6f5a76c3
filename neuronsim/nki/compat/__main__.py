"""``python -m neuronsim.nki.compat PATH``: run a checkout of a kernel repository unchanged and
write a table: kernel, ran, correct, max error, trn2/trn3 time, first error, plus totals.

- aws-neuron/nki-library (``PATH/test/utils/unit_test_framework.py`` exists): the library's own
  ``fast`` test cases (its inputs, torch references and tolerances) run through pytest with
  neuronsim as the test orchestrator (``harness.py``); one row per case.
- aws-neuron/nki-samples (``PATH/src/nki_samples`` exists): its legacy kernels (``neuronxcc.nki``)
  against the repository's own mains and tutorial tests (``samples.py``); one row per kernel.
- anything else (the SDK's ``nki/examples``, your kernels folder): every ``.py`` file importing the
  ``nki`` API (current, or legacy ``neuronxcc.nki``) runs as ``__main__`` with its own numpy check
  (``examples.py``); one row per file.

Options: ``--out FILE`` (markdown; default stdout), ``--chips trn2,trn3``, ``-k EXPR`` (pytest
selection for the library; a path substring for nki-samples), ``--cases N`` (the first N cases of each library test function),
``--timeout S`` (per example file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from neuronsim.nki.compat.examples import find_examples, run_example
from neuronsim.nki.compat.report import markdown
from neuronsim.nki.compat.samples import is_samples, run_samples


def run_library(repo: Path, chips: list[str], select: str | None, cases: int = 0) -> list[dict]:
    out = Path(tempfile.mkstemp(suffix=".jsonl", prefix="nki-compat-")[1])
    cmd = [sys.executable, "-m", "pytest", "-p", "neuronsim.nki.compat.harness", "--noconftest",
           "-p", "no:cacheprovider", "-m", "fast", "-q", "--continue-on-collection-errors",
           "--compat-repo", str(repo), "--compat-out", str(out), "--compat-chips", ",".join(chips),
           "--compat-cases", str(cases),
           "--rootdir", str(repo), "-c", os.devnull, "-W", "ignore::pytest.PytestUnknownMarkWarning",
           str(repo / "test" / "integration")]
    if select:
        cmd += ["-k", select]
    subprocess.run(cmd, cwd=repo, env=dict(os.environ, NEURON_SIM="1"), check=False)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    out.unlink()
    return rows


def run_examples(root: Path, chips: list[str], timeout: float) -> list[dict]:
    rows = []
    for path in find_examples(root):
        row = {"kernel": str(path.relative_to(root)), "test": str(path.relative_to(root))}
        for i, chip in enumerate(chips):
            r = run_example(path, chip, timeout)
            if i == 0:
                row.update({k: r[k] for k in ("ran", "correct", "error", "launches")})
                row["max_error"] = None
            row[f"{chip}_s"] = r["seconds"]
            if not r["ran"]:
                break
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuronsim.nki.compat",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--chips", default="trn2,trn3")
    parser.add_argument("-k", dest="select", default=None)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--cases", type=int, default=0,
                        help="library: the first N cases of each test function only (0: all)")
    args = parser.parse_args(argv)
    root = args.path.resolve()
    chips = [c for c in args.chips.split(",") if c]
    library = (root / "test" / "utils" / "unit_test_framework.py").exists()
    if library:
        rows, kind = run_library(root, chips, args.select, args.cases), "library tests"
    elif is_samples(root):
        rows, kind = run_samples(root, chips, args.timeout, args.select), "legacy kernels"
    else:
        rows, kind = run_examples(root, chips, args.timeout), "examples"
    text = markdown(rows, chips, title=f"{root.name} ({kind})")
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
