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
selection for the library; a path substring for nki-samples), ``--cases N`` (the first N cases of
each library test function), ``--timeout S`` (per example file), ``--memory GiB`` (the library's
test process; a case that kills it is recorded as failed and the run resumes after it),
``--nki-version V`` (the NKI release whose semantics the kernels get where releases differ,
``NEURON_SIM_NKI_VERSION``; default the current one: run a repository with the release its commit
was written for, ``neuronsim/nki_releases.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from neuronsim import env, nki_releases
from neuronsim.nki.compat.examples import find_examples, run_example
from neuronsim.nki.compat.report import markdown
from neuronsim.nki.compat.samples import is_samples, run_samples


def run_library(repo: Path, chips: list[str], select: str | None, cases: int = 0,
                memory_gib: float | None = None) -> list[dict]:
    """The library's tests in one pytest process; if it dies in a case (the host's OOM killer, a
    crash), that case is recorded as failed and a new process resumes after it."""
    fd, name = tempfile.mkstemp(suffix=".jsonl", prefix="nki-compat-")
    os.close(fd)
    out, skip = Path(name), Path(name + ".skip")
    cmd = [sys.executable, "-m", "pytest", "-p", "neuronsim.nki.compat.harness", "--noconftest",
           "-p", "no:cacheprovider", "-m", "fast", "-q", "--continue-on-collection-errors",
           "--compat-repo", str(repo), "--compat-out", str(out), "--compat-chips", ",".join(chips),
           "--compat-cases", str(cases), "--compat-skip", str(skip),
           "--rootdir", str(repo), "-c", os.devnull, "-W", "ignore::pytest.PytestUnknownMarkWarning",
           str(repo / "test" / "integration")]
    if select:
        cmd += ["-k", select]
    limit = _memory_limit(memory_gib)
    try:
        while True:
            skip.write_text("\n".join(_seen(out)) + "\n")
            proc = subprocess.run(cmd, cwd=repo, env=dict(os.environ, NEURON_SIM="1"), check=False,
                                  preexec_fn=(lambda: _limit_memory(limit)) if limit else None)
            lost = _unfinished(out)
            if proc.returncode >= 0 or lost is None:
                break
            bound = f"host memory limit {limit / (1 << 30):.1f} GiB" if limit else "no memory limit"
            row = {"test": lost, "kernel": lost.split("::")[0].rsplit("/", 1)[-1], "ran": False,
                   "correct": False, "max_error": None,
                   "error": f"the test process died in this case (signal {-proc.returncode}; {bound})"}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        rows = [r for r in _records(out) if "started" not in r]
    finally:
        out.unlink(missing_ok=True)
        skip.unlink(missing_ok=True)
    return rows


def _records(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _seen(out: Path) -> list[str]:
    """Test ids with a result (or a start marker whose process died): not run again."""
    return sorted({r.get("test") or r.get("started") for r in _records(out)})


def _unfinished(out: Path) -> str | None:
    """The last case started without a result row, if any."""
    records = _records(out)
    done = {r.get("test") for r in records if "started" not in r}
    started = [r["started"] for r in records if "started" in r]
    return started[-1] if started and started[-1] not in done else None


def _memory_limit(gib: float | None) -> int | None:
    """The address-space limit of the test process: ``--memory GiB``, or 85% of the host's available
    memory, so a test whose own data exceeds the host fails with MemoryError in its case rather than
    the OOM killer ending the run (None where the host's memory is unknown)."""
    if gib is not None:
        return int(gib * (1 << 30)) if gib > 0 else None
    from neuronsim.nki.hbm import host_available_bytes

    avail = host_available_bytes()
    return None if avail is None else max(int(avail * 0.85), 4 << 30)


def _limit_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


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
    parser.add_argument("--memory", type=float, default=None,
                        help="library: the test process's memory limit in GiB (default: 85%% of the "
                             "host's available memory; 0: none)")
    parser.add_argument("--nki-version", default=None,
                        help="the NKI release simulated where releases differ "
                             f"({', '.join(nki_releases.RELEASES)}; "
                             f"default {env.NEURON_SIM_NKI_VERSION} or {nki_releases.CURRENT})")
    args = parser.parse_args(argv)
    if args.nki_version is not None:
        try:
            version = nki_releases.normalize(args.nki_version)
        except ValueError as exc:
            parser.error(f"--nki-version: {exc}")
        os.environ[env.NEURON_SIM_NKI_VERSION] = version  # every test process and example inherits it
    version = os.environ.get(env.NEURON_SIM_NKI_VERSION) or nki_releases.CURRENT
    root = args.path.resolve()
    chips = [c for c in args.chips.split(",") if c]
    library = (root / "test" / "utils" / "unit_test_framework.py").exists()
    if library:
        rows, kind = run_library(root, chips, args.select, args.cases, args.memory), "library tests"
    elif is_samples(root):
        rows, kind = run_samples(root, chips, args.timeout, args.select), "legacy kernels"
    else:
        rows, kind = run_examples(root, chips, args.timeout), "examples"
    text = markdown(rows, chips, title=f"{root.name} ({kind}, NKI {version})")
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
