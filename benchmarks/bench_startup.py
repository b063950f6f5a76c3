"""Cold start: ``NEURON_SIM=1 python examples/train_gpt.py`` to the end of its first step, on a fresh
Numba cache directory, for one process and for three started together, next to a warm run (a cache
a cold run filled), all measured in one run. Prints wall time and each process's CPU time (user +
system, from ``wait4``), and the ratios issue #21 asks for.

    python benchmarks/bench_startup.py [--concurrent 3] [--steps 1] [--repeats 3] [--executor tiered] [--json]

Each process is a new Python: importing torch and neuronsim is part of the start either way, and
the difference cold - warm is what a cold cache costs the run. Three warm processes started together
show what sharing the machine's cores costs by itself (on 2 cores, three busy processes get 2/3 of
a core each: 1.5x), the floor under the cold ratio. The three share one session, and Linux's
autogroup scheduler gives each session an equal share of a busy machine, so under other sessions'
load that floor rises towards 3x; the cold over the warm three shows what the cold cache adds on
top of it.

A shared machine's load moves by the minute, so the runs a ratio compares are made next to each
other, and repeated: each repeat runs three cold processes together, one cold process, one warm
and three warm together, in that order, each cold run on a fresh directory. With the tiered
executor (the default) a cold process compiles no Numba code itself: its compile worker
(sim/tiers.py) fills the cache during or after the run. Of the device's C++ libraries it builds the
core one (device/cpp/build.py); the cached-op library is built after it exits
(device/cpp/background.py). The first repeat's one cold process fills the cache the warm runs use:
the benchmark waits for its worker and builder and reports their CPU seconds (off the run's critical
path, not free). The other cold runs' directories are deleted as soon as they end, which
stops their workers (they would take CPU from the next runs); the CPU the workers had used by
then is printed: what they took from the runs, whatever the machine's load. ``--executor numba``
measures compiling in place, as before the tiers.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from neuronsim.device.cpp import background  # noqa: E402 - (light: imports neither torch nor Numba)

WORKER_LOCK = ".workers.lock"  # sim/tiers.WORKER_LOCK (not imported: importing the simulator loads Numba)
SCRIPT = ROOT / "examples" / "train_gpt.py"


def _start(cache: Path, steps: int, executor: str) -> tuple[int, float]:
    env = dict(os.environ, NEURON_SIM="1", NEURON_SIM_CACHE_DIR=str(cache), NEURON_SIM_EXECUTOR=executor,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(SCRIPT), "--steps", str(steps), "--quiet"]
    pid = os.posix_spawn(sys.executable, argv, env)
    return pid, time.perf_counter()


def _wait(started: list[tuple[int, float]]) -> list[dict]:
    """Wait for every process; its wall seconds (start to exit) and CPU seconds."""
    done: dict[int, dict] = {}
    begun = dict(started)
    while len(done) < len(started):
        pid, status, usage = os.wait4(-1, 0)
        if pid not in begun:
            continue
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"train_gpt.py exited with {os.waitstatus_to_exitcode(status)}")
        done[pid] = {"wall_s": time.perf_counter() - begun[pid], "cpu_s": usage.ru_utime + usage.ru_stime}
    return [done[pid] for pid, _ in started]


def run(cache: Path, processes: int, steps: int, executor: str) -> list[dict]:
    return _wait([_start(cache, steps, executor) for _ in range(processes)])


def wait_for_workers(cache: Path) -> None:
    """Until the compile workers the processes on ``cache`` left behind, and the builder of the device's
    cached-op library, have finished."""
    for lock in cache.glob(f"*/{WORKER_LOCK}"):
        fd = os.open(lock, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # each live worker holds it shared
        os.close(fd)
    background.wait_for_builder(cache)


def live_worker_cpu_s(cache: Path) -> float:
    """CPU seconds used so far by the compile workers still running on ``cache`` (read as the runs end:
    what the workers took from them; a worker's command line names its cache directory)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        try:
            if str(cache) not in (proc / "cmdline").read_bytes().decode(errors="replace"):
                continue
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return total


def discard(cache: Path) -> None:
    """Delete a cold run's directory: its workers stop within half a second (compile_worker.py)."""
    shutil.rmtree(cache, ignore_errors=True)
    time.sleep(1.0)


def worker_cpu_s(cache: Path) -> float:
    """CPU seconds of every compile worker (and library builder) that worked for processes on ``cache``."""
    total = 0.0
    for log in [*cache.glob("*/background.log"), *cache.glob(background.LOG)]:
        total += sum(json.loads(line)["cpu_s"] for line in log.read_text().splitlines() if line.strip())
    return total


def repeat(tmp: Path, index: int, warm_cache: Path, args) -> dict:
    many = tmp / f"many-{index}"
    together = run(many, args.concurrent, args.steps, args.executor)
    together_workers = live_worker_cpu_s(many)
    discard(many)
    one = warm_cache if index == 0 else tmp / f"one-{index}"
    cold = run(one, 1, args.steps, args.executor)[0]
    cold_workers = live_worker_cpu_s(one)
    workers = None
    if index == 0:
        wait_for_workers(one)
        workers = worker_cpu_s(one)
    else:
        discard(one)
    warm = run(warm_cache, 1, args.steps, args.executor)[0]
    warm_together = run(warm_cache, args.concurrent, args.steps, args.executor)
    return {
        "concurrent_cold": together, "cold": cold, "warm": warm, "concurrent_warm": warm_together,
        "cold_worker_cpu_s": workers,
        "worker_cpu_s_by_the_end": {"concurrent_cold": together_workers, "cold": cold_workers},
        "cold_minus_warm_wall_s": cold["wall_s"] - warm["wall_s"],
        "cold_minus_warm_cpu_s": cold["cpu_s"] - warm["cpu_s"],
        "concurrent_over_cold_wall": [p["wall_s"] / cold["wall_s"] for p in together],
        "concurrent_warm_over_warm_wall": [p["wall_s"] / warm["wall_s"] for p in warm_together],
        "concurrent_cold_over_concurrent_warm_wall": [c["wall_s"] / w["wall_s"]
                                                      for c, w in zip(together, warm_together, strict=True)],
        "load_1min": os.getloadavg()[0],
    }


def _range(values: list[float], unit: str = "x") -> str:
    lo, hi, mid = min(values), max(values), statistics.median(values)
    return f"{lo:.2f}-{hi:.2f}{unit} (median {mid:.2f}{unit})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--executor", default="tiered", choices=("tiered", "numba"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="neuronsim-startup-") as tmp:
        for index in range(args.repeats):
            results.append(repeat(Path(tmp), index, Path(tmp) / "warm", args))
            if not args.json:
                _print_repeat(index, results[-1], args)
    if args.json:
        print(json.dumps({"executor": args.executor, "repeats": results}, indent=2))
        return 0
    n = args.concurrent
    print(f"over {args.repeats} repeats (each ratio between runs of one repeat):")
    print(f"  cold - warm: {_range([r['cold_minus_warm_wall_s'] for r in results], ' s')} wall, "
          f"{_range([r['cold_minus_warm_cpu_s'] for r in results], ' s')} CPU (target: at most 15 s)")
    print(f"  {n} cold together, each over one cold process: "
          f"{_range([x for r in results for x in r['concurrent_over_cold_wall']])} (target: at most 1.5x)")
    print(f"  {n} warm together, each over one warm process: "
          f"{_range([x for r in results for x in r['concurrent_warm_over_warm_wall']])} (the floor: the "
          f"machine's own sharing of its {os.cpu_count()} cores, which no cache removes)")
    taken = [r["worker_cpu_s_by_the_end"]["concurrent_cold"] for r in results]
    print(f"  compile workers' CPU while the {n} cold ran: {_range(taken, ' s')}")
    print(f"  {n} cold together, each over the {n} warm together: "
          f"{_range([x for r in results for x in r['concurrent_cold_over_concurrent_warm_wall']])} (what the "
          f"cold cache adds to running together)")
    loads = ", ".join(f"{r['load_1min']:.1f}" for r in results)
    print(f"  load average after each repeat: {loads}")
    return 0


def _print_repeat(index: int, r: dict, args) -> None:
    if index == 0:
        print(f"train_gpt.py --steps {args.steps}, NEURON_SIM=1, NEURON_SIM_EXECUTOR={args.executor}, "
              f"fresh Numba cache directories")
    n = args.concurrent
    print(f"repeat {index + 1} of {args.repeats}          wall s    CPU s")
    for i, p in enumerate(r["concurrent_cold"]):
        print(f"  {f'cold, {i + 1} of {n} together':<22} {p['wall_s']:8.1f} {p['cpu_s']:8.1f}")
    print(f"  {'cold (one process)':<22} {r['cold']['wall_s']:8.1f} {r['cold']['cpu_s']:8.1f}")
    print(f"  {'warm':<22} {r['warm']['wall_s']:8.1f} {r['warm']['cpu_s']:8.1f}")
    for i, p in enumerate(r["concurrent_warm"]):
        print(f"  {f'warm, {i + 1} of {n} together':<22} {p['wall_s']:8.1f} {p['cpu_s']:8.1f}")
    if r["cold_worker_cpu_s"] is not None and args.executor == "tiered":
        print(f"  compile workers of the one cold process (off its critical path, going on after it): "
              f"{r['cold_worker_cpu_s']:.1f} s CPU")
    print(f"  compile workers' CPU by the time the runs ended: {r['worker_cpu_s_by_the_end']['cold']:.1f} s "
          f"(one cold), {r['worker_cpu_s_by_the_end']['concurrent_cold']:.1f} s ({n} cold together)")
    ratios = ", ".join(f"{x:.2f}x" for x in r["concurrent_over_cold_wall"])
    floor = ", ".join(f"{x:.2f}x" for x in r["concurrent_warm_over_warm_wall"])
    over_warm = ", ".join(f"{x:.2f}x" for x in r["concurrent_cold_over_concurrent_warm_wall"])
    print(f"  cold - warm {r['cold_minus_warm_wall_s']:.1f} s wall, {r['cold_minus_warm_cpu_s']:.1f} s CPU; "
          f"{n} cold over one cold {ratios}; {n} warm over one warm {floor}; {n} cold over {n} warm "
          f"{over_warm}; load {r['load_1min']:.1f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
