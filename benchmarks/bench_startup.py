"""Cold start: ``NEURON_SIM=1 python examples/train_gpt.py`` to the end of its first step, on a fresh
Numba cache directory, for one process and for three started together, next to a warm run (the
cache the cold run filled), all measured in one run. Prints wall time and each process's CPU time
(user + system, from ``wait4``: robust to a busy machine), and the ratios issue #21 asks for.

    python benchmarks/bench_startup.py [--concurrent 3] [--steps 1] [--executor tiered] [--json]

Each process is a new Python: importing torch and neuronsim is part of the start either way, and
the difference cold - warm is what a cold cache costs the run. Three warm processes started together
show what sharing the machine's cores costs by itself (on 2 cores, three busy processes get 2/3 of
a core each: 1.5x), the floor under the cold ratio. The three share one session, and Linux's
autogroup scheduler gives each session an equal share of a busy machine, so under other sessions'
load that floor rises towards 3x; the cold over the warm three shows what the cold cache adds on
top of it. With the tiered executor (the
default) a cold process compiles nothing itself: its compile worker (sim/tiers.py) fills the cache
meanwhile and goes on after the process exits; the benchmark waits for the workers before the next
run and reports their CPU seconds apart (they are off the run's critical path, not free).
``--executor numba`` measures compiling in place, as before the tiers.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
    done = _wait([_start(cache, steps, executor) for _ in range(processes)])
    for lock in cache.glob(f"*/{WORKER_LOCK}"):  # the compile workers the processes left behind
        fd = os.open(lock, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # each live worker holds it shared
        os.close(fd)
    return done


def worker_cpu_s(cache: Path) -> float:
    """CPU seconds of every compile worker that worked for processes on ``cache``."""
    total = 0.0
    for log in cache.glob("*/background.log"):
        total += sum(json.loads(line)["cpu_s"] for line in log.read_text().splitlines() if line.strip())
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--executor", default="tiered", choices=("tiered", "numba"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="neuronsim-startup-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        cold = run(one, 1, args.steps, args.executor)[0]
        cold_workers = worker_cpu_s(one)
        warm = run(one, 1, args.steps, args.executor)[0]
        together = run(many, args.concurrent, args.steps, args.executor)
        together_workers = worker_cpu_s(many)
        warm_together = run(many, args.concurrent, args.steps, args.executor)
    result = {
        "executor": args.executor, "cold": cold, "warm": warm, "concurrent_cold": together,
        "cold_worker_cpu_s": cold_workers, "concurrent_worker_cpu_s": together_workers,
        "cold_minus_warm_wall_s": cold["wall_s"] - warm["wall_s"],
        "cold_minus_warm_cpu_s": cold["cpu_s"] - warm["cpu_s"],
        "concurrent_over_cold_wall": [p["wall_s"] / cold["wall_s"] for p in together],
        "concurrent_warm": warm_together,
        "concurrent_warm_over_warm_wall": [p["wall_s"] / warm["wall_s"] for p in warm_together],
        "concurrent_cold_over_concurrent_warm_wall": [c["wall_s"] / w["wall_s"]
                                                      for c, w in zip(together, warm_together, strict=True)],
        "load_1min": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"train_gpt.py --steps {args.steps}, NEURON_SIM=1, NEURON_SIM_EXECUTOR={args.executor}, "
          f"fresh Numba cache directories")
    print(f"  {'run':<22} {'wall s':>8} {'CPU s':>8}")
    print(f"  {'cold (one process)':<22} {cold['wall_s']:8.1f} {cold['cpu_s']:8.1f}")
    print(f"  {'warm':<22} {warm['wall_s']:8.1f} {warm['cpu_s']:8.1f}")
    for i, p in enumerate(together):
        print(f"  {f'cold, {i + 1} of {len(together)} together':<22} {p['wall_s']:8.1f} {p['cpu_s']:8.1f}")
    print(f"cold - warm: {result['cold_minus_warm_wall_s']:.1f} s wall, "
          f"{result['cold_minus_warm_cpu_s']:.1f} s CPU (target: at most 15 s)")
    if args.executor == "tiered":
        print(f"compile workers (off the critical path, going on after the run): {cold_workers:.1f} s CPU "
              f"for the cold run, {together_workers:.1f} s for the {len(together)} together")
    for i, p in enumerate(warm_together):
        label = f"warm, {i + 1} of {len(warm_together)} together"
        print(f"  {label:<22} {p['wall_s']:8.1f} {p['cpu_s']:8.1f}")
    ratios = ", ".join(f"{r:.2f}x" for r in result["concurrent_over_cold_wall"])
    print(f"{len(together)} together, each over one cold process (wall): {ratios} (target: at most 1.5x)")
    floor = ", ".join(f"{r:.2f}x" for r in result["concurrent_warm_over_warm_wall"])
    print(f"{len(warm_together)} warm together, each over one warm process (wall): {floor} "
          f"(the machine's own sharing of its {os.cpu_count()} cores, which no cache removes)")
    over_warm = ", ".join(f"{r:.2f}x" for r in result["concurrent_cold_over_concurrent_warm_wall"])
    print(f"{len(together)} cold together, each over the {len(warm_together)} warm together (wall): "
          f"{over_warm} (what the cold cache adds to running together); load average at the end "
          f"{result['load_1min']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
