"""Run benchmarks on this checkout and on an older commit side by side, in one run: the no-regression
check (issue #21: bench_sim, bench_tracing and bench_compile print before/after).

    python benchmarks/compare.py --baseline 5589d0f [--repeats 3] [--args "--steps 4"] bench_sim.py ...

The baseline is ``git archive``d once into a fixed directory beside its cache root (Numba names each
cache subdirectory after the absolute path of the source's directory, so a fresh temporary tree per
run would recompile the whole executor every time; not inside the root, which older versions
empty). Each benchmark runs as a fresh process from each tree (that tree's own benchmark script,
which knows its own API), alternating baseline, current, baseline, ... so both see the same
machine load. Each tree has its own Numba
cache root (``NEURON_SIM_CACHE_DIR``, by default beside the usual one; warm it first: the first run
of a tree compiles) so neither version's cache pushes out the other's. It prints every run's
output, then, line by line, each number of the current run over the same number of the baseline
(medians over the repeats): a time that grew, or a rate that fell, is a regression.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*(?:e[-+]?\d+)?")


def _export(commit: str, cache_root: Path) -> Path:
    """``commit``'s tree at a path fixed per commit and cache (so its Numba cache is found again)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    into = cache_root.with_name(f"{cache_root.name}.tree-{sha[:12]}")
    done = into / ".exported"
    if done.exists():
        return into
    shutil.rmtree(into, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    done.touch()
    return into


def _run(tree: Path, script: str, cache: Path, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree), NEURON_SIM_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, str(tree / "benchmarks" / script), *args], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{script} in {tree} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def _summary(base_runs: list[str], head_runs: list[str]) -> list[str]:
    """Per output line: the line (current tree, first run) and current/baseline for each number."""
    out = []
    base_lines = [r.splitlines() for r in base_runs]
    head_lines = [r.splitlines() for r in head_runs]
    for i, line in enumerate(head_lines[0]):
        try:
            head = [_numbers(r[i]) for r in head_lines]
            base = [_numbers(r[i]) for r in base_lines]
        except IndexError:
            continue
        if not head[0] or any(len(n) != len(head[0]) for n in head + base):
            continue
        ratios = []
        for j in range(len(head[0])):
            h = statistics.median(n[j] for n in head)
            b = statistics.median(n[j] for n in base)
            ratios.append(f"{h / b:.2f}" if b else "-")
        out.append(f"{line.strip()}\n    current/baseline per number: {' '.join(ratios)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a commit of this repository")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-cache", type=Path, help="its Numba cache root (default: beside ours)")
    parser.add_argument("--args", default="", help="arguments for every script")
    parser.add_argument("scripts", nargs="+", help="benchmark scripts in benchmarks/")
    args = parser.parse_args(argv)
    extra = args.args.split()
    ours = Path(os.environ.get("NEURON_SIM_CACHE_DIR") or Path.home() / ".cache" / "neuronsim")
    base_cache = args.baseline_cache or ours.with_name(ours.name + "-baseline")
    base_tree = _export(args.baseline, base_cache)
    for script in args.scripts:
        base_runs, head_runs = [], []
        for r in range(args.repeats):
            base_runs.append(_run(base_tree, script, base_cache, extra))
            head_runs.append(_run(ROOT, script, ours, extra))
            print(f"== {script}, run {r + 1}: baseline {args.baseline}\n{base_runs[-1]}"
                  f"== {script}, run {r + 1}: current\n{head_runs[-1]}", flush=True)
        print(f"== {script}: current over baseline {args.baseline} (medians of {args.repeats})")
        print("\n".join(_summary(base_runs, head_runs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
