"""Run benchmarks on this checkout and on an older commit side by side, in one run: the no-regression
check (issue #21: bench_sim, bench_tracing and bench_compile print before/after).

    python benchmarks/compare.py --baseline 5589d0f [--repeats 3] [--timeout 1200] \\
        bench_sim.py bench_tracing.py bench_compile.py

The baseline is ``git archive``d once into a fixed directory beside its cache root (Numba names each
cache subdirectory after the absolute path of the source's directory, so a fresh temporary tree per
run would recompile the whole executor every time; not inside the root, which older versions
empty). Each tree has its own Numba cache root (``NEURON_SIM_CACHE_DIR``, by default beside the usual
one; warm both first: the first run of a tree compiles, ``neuronsim warmup`` where the tree has it)
so neither version's cache pushes out the other's.

Each benchmark runs as a fresh process in each tree (``NEURON_SIM=1``), alternating baseline,
current, baseline, ... so both see the same machine load. By default both trees run this checkout's
script (copied beside the baseline's own for its runs, so it finds that tree's examples): the same
measurements, including the CPU times the scripts print (thread or process CPU time, which a busy
machine changes far less than wall time); ``--own-scripts`` runs each tree's own, as does a
baseline this checkout's script fails on (it imports what the baseline lacks). Besides what a
script prints, each run's process CPU time (user + system, its children included) is measured here.

It prints every run's output, then per script and at the end for all of them, line by line, each
number as baseline -> current (medians over the repeats) and their ratio: a time that grew, or a
rate that fell, is a regression. A run past ``--timeout`` is stopped; the lines it printed by then
still count.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*(?:e[-+]?\d+)?")
CPU_LINE = "process CPU time, s:"  # the line this script adds to each run's output


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


def _script_in(tree: Path, script: str, own: bool) -> Path:
    """The script a tree runs: its own, or this checkout's copied into its ``benchmarks/``."""
    if own or tree == ROOT:
        return tree / "benchmarks" / script
    copy = _copy_path(tree, script)
    shutil.copyfile(ROOT / "benchmarks" / script, copy)
    return copy


def _copy_path(tree: Path, script: str) -> Path:
    return tree / "benchmarks" / f"{Path(script).stem}.current.py"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class RunFailed(Exception):
    pass


def _run(tree: Path, script: Path, cache: Path, args: list[str], timeout: float | None) -> str:
    """The script's output in ``tree``, and a last line with the process CPU time it took."""
    env = dict(os.environ, PYTHONPATH=str(tree), NEURON_SIM_CACHE_DIR=str(cache), NEURON_SIM="1")
    cpu0 = _children_cpu()
    proc = subprocess.Popen([sys.executable, str(script), *args], cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        out += f"(stopped after {timeout:.0f} s)\n"
    else:
        if proc.returncode != 0:
            raise RunFailed(f"{script.name} in {tree} failed:\n{err[-3000:]}")
    return out + f"{CPU_LINE} {_children_cpu() - cpu0:.2f}\n"


def _numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _summary(base_runs: list[str], head_runs: list[str]) -> list[str]:
    """Per output line present in every run with the same count of numbers: the line (current tree,
    first run), then each number as baseline median -> current median = ratio (one value where the
    medians are equal)."""
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
        cells = []
        for j in range(len(head[0])):
            h = statistics.median(n[j] for n in head)
            b = statistics.median(n[j] for n in base)
            if h == b:  # sizes, counts: the same in both trees
                cells.append(_fmt(h))
            else:
                cells.append(f"{_fmt(b)} -> {_fmt(h)} = {h / b:.2f}" if b else f"{_fmt(b)} -> {_fmt(h)}")
        out.append(f"{line.strip()}\n    {' | '.join(cells)}")
    return out


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a commit of this repository")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-cache", type=Path, help="its Numba cache root (default: beside ours)")
    parser.add_argument("--args", default="", help="arguments for every script")
    parser.add_argument("--own-scripts", action="store_true", help="each tree runs its own benchmark scripts")
    parser.add_argument("--timeout", type=float, help="seconds a run may take before it is stopped")
    parser.add_argument("scripts", nargs="+", help="benchmark scripts in benchmarks/")
    args = parser.parse_args(argv)
    extra = args.args.split()
    ours = Path(os.environ.get("NEURON_SIM_CACHE_DIR") or Path.home() / ".cache" / "neuronsim")
    base_cache = args.baseline_cache or ours.with_name(ours.name + "-baseline")
    base_tree = _export(args.baseline, base_cache)
    tables = []
    for script in args.scripts:
        base_script = _script_in(base_tree, script, args.own_scripts)
        own = args.own_scripts
        base_runs, head_runs, loads = [], [], []
        for r in range(args.repeats):
            loads.append(_load())
            try:
                base_runs.append(_run(base_tree, base_script, base_cache, extra, args.timeout))
            except RunFailed as failed:
                if own or r:
                    raise SystemExit(str(failed)) from None
                # this checkout's script uses what the baseline lacks: the baseline runs its own
                print(f"{failed}\n(the baseline runs its own {script} instead)", flush=True)
                own, base_script = True, _script_in(base_tree, script, True)
                base_runs.append(_run(base_tree, base_script, base_cache, extra, args.timeout))
            loads.append(_load())
            try:
                head_runs.append(_run(ROOT, ROOT / "benchmarks" / script, ours, extra, args.timeout))
            except RunFailed as failed:
                raise SystemExit(str(failed)) from None
            print(f"== {script}, run {r + 1}: baseline {args.baseline}\n{base_runs[-1]}"
                  f"== {script}, run {r + 1}: current\n{head_runs[-1]}", flush=True)
        _copy_path(base_tree, script).unlink(missing_ok=True)  # the export stays the commit's tree
        scripts = "each tree's own script" if own else "this checkout's script in both"
        title = (f"== {script}: baseline {args.baseline} -> current, medians of {args.repeats} alternating "
                 f"runs (load {min(loads):.1f}-{max(loads):.1f}; {scripts})")
        tables.append(title + "\n" + "\n".join(_summary(base_runs, head_runs)))
        print(tables[-1], flush=True)
    print("\n== all: baseline -> current = current/baseline\n" + "\n".join(tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
