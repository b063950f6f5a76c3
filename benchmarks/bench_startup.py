"""Cold start: ``NEURON_SIM=1 python examples/train_gpt.py`` to the end of its first step, on a fresh
Numba cache directory, for one process and for three started together, next to a warm run (the
cache the cold run filled), all measured in one run. Prints wall time and each process's CPU time
(user + system, from ``wait4``: robust to a busy machine), and the ratios issue #21 asks for.

    python benchmarks/bench_startup.py [--concurrent 3] [--steps 1] [--json]

Each process is a new Python: importing torch and neuronsim is part of the start either way, and
the difference cold - warm is what compiling costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "train_gpt.py"


def _start(cache: Path, steps: int) -> tuple[int, float]:
    env = dict(os.environ, NEURON_SIM="1", NEURON_SIM_CACHE_DIR=str(cache),
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


def run(cache: Path, processes: int, steps: int) -> list[dict]:
    return _wait([_start(cache, steps) for _ in range(processes)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="neuronsim-startup-") as tmp:
        cold = run(Path(tmp) / "one", 1, args.steps)[0]
        warm = run(Path(tmp) / "one", 1, args.steps)[0]
        together = run(Path(tmp) / "many", args.concurrent, args.steps)
    result = {
        "cold": cold, "warm": warm, "concurrent_cold": together,
        "cold_minus_warm_wall_s": cold["wall_s"] - warm["wall_s"],
        "cold_minus_warm_cpu_s": cold["cpu_s"] - warm["cpu_s"],
        "concurrent_over_cold_wall": [p["wall_s"] / cold["wall_s"] for p in together],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"train_gpt.py --steps {args.steps}, NEURON_SIM=1, fresh Numba cache directories")
    print(f"  {'run':<22} {'wall s':>8} {'CPU s':>8}")
    print(f"  {'cold (one process)':<22} {cold['wall_s']:8.1f} {cold['cpu_s']:8.1f}")
    print(f"  {'warm':<22} {warm['wall_s']:8.1f} {warm['cpu_s']:8.1f}")
    for i, p in enumerate(together):
        print(f"  {f'cold, {i + 1} of {len(together)} together':<22} {p['wall_s']:8.1f} {p['cpu_s']:8.1f}")
    print(f"cold - warm: {result['cold_minus_warm_wall_s']:.1f} s wall, "
          f"{result['cold_minus_warm_cpu_s']:.1f} s CPU (target: at most 15 s)")
    ratios = ", ".join(f"{r:.2f}x" for r in result["concurrent_over_cold_wall"])
    print(f"{len(together)} together, each over one cold process (wall): {ratios} (target: at most 1.5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
