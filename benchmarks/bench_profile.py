"""Profiling overhead: ``neuronsim profile`` (op detail) over ``neuronsim run`` on examples/train_gpt.py.
Target: ratio <= 1.10.

Two measurements, each interleaved (run, profile, run, profile, ...: this machine is shared and
noisy, so load changes hit both) with the median and the best of ``--repeats`` reported, in wall
time and in CPU time (user + system of the process: on a loaded machine wall times swing by tens
of percent between identical runs, CPU times by a few; the profiler's own work is CPU work):

- ``commands``: the two commands as a user runs them, each a fresh process (interpreter, imports,
  kernel tracing included: what the user waits for);
- ``in-process``: after a warm-up in this process, the script alone (``run``) against the whole
  ``profile`` command (recording, trace/summary/ops writing, the printed summary): the steady-state
  overhead, without the fixed start-up costs that dilute the first ratio.

    python benchmarks/bench_profile.py [--steps 40] [--repeats 5] [--detail op] [--torch-profiler] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py"
TARGET = 1.10


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``neuronsim ARGV`` in a fresh process (the console script's target)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NEURON_SIM") or k == "NEURON_SIM_CACHE_DIR"}
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, "-m", "neuronsim.cli.main", *argv], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"neuronsim {' '.join(argv)} failed:\n{done.stderr}")
    return elapsed, cpu


def _timed(fn) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def in_process_run(script_args: list[str]) -> tuple[float, float]:
    from neuronsim.cli.script import run_script

    def run():
        assert run_script(str(EXAMPLE), script_args) == 0

    return _timed(run)


def in_process_profile(profile_args: list[str], script_args: list[str]) -> tuple[float, float]:
    from neuronsim.cli.profile import profile

    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            assert profile.main([*profile_args, str(EXAMPLE), *script_args], standalone_mode=False) == 0

    return _timed(run)


def interleaved(repeats: int, pair) -> dict:
    """Alternate the two measurements ``repeats`` times; per clock (wall, cpu): the medians, the
    bests and their ratios."""
    samples = [pair() for _ in range(repeats)]
    out = {}
    for k, clock_name in enumerate(("wall", "cpu")):
        runs = [run[k] for run, _ in samples]
        profiles = [prof[k] for _, prof in samples]
        run_med, prof_med = statistics.median(runs), statistics.median(profiles)
        out[clock_name] = {
            "run_s": runs, "profile_s": profiles,
            "run_median_s": run_med, "profile_median_s": prof_med, "ratio_median": prof_med / run_med,
            "run_best_s": min(runs), "profile_best_s": min(profiles), "ratio_best": min(profiles) / min(runs),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--detail", choices=["op", "instruction"], default="op")
    p.add_argument("--torch-profiler", action="store_true", help="profile with --torch-profiler host ops")
    p.add_argument("--no-host-ops", dest="host_ops", action="store_false", help="profile with --no-host-ops")
    p.add_argument("--skip-commands", action="store_true", help="only the in-process measurement")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    script_args = ["--steps", str(a.steps), "--quiet"]
    with tempfile.TemporaryDirectory() as out:
        profile_args = ["-o", out, "--detail", a.detail]
        if not a.host_ops:
            profile_args.append("--no-host-ops")
        elif a.torch_profiler:
            profile_args.append("--torch-profiler")
        result = {"steps": a.steps, "detail": a.detail, "host_ops": a.host_ops,
                  "torch_profiler": a.torch_profiler, "target_ratio": TARGET}
        if not a.skip_commands:
            command(["run", str(EXAMPLE), "--steps", "1", "--quiet"])  # warm-up: compile caches on disk
            result["commands"] = interleaved(a.repeats, lambda: (
                command(["run", str(EXAMPLE), *script_args]),
                command(["profile", *profile_args, str(EXAMPLE), *script_args])))
        # in-process: the device must be set up before torch is imported, as `neuronsim profile` does
        from neuronsim.cli.script import enable_device_environment

        enable_device_environment("trn2", "exact")
        import torch

        from neuronsim.device import clock

        in_process_run(["--steps", "2", "--quiet"])  # warm-up: imports, kernel tracing, caches
        in_process_profile(profile_args, ["--steps", "2", "--quiet"])

        def pair():
            clock.clock(0).reset()
            a_s = in_process_run(script_args)
            clock.clock(0).reset()
            return a_s, in_process_profile(profile_args, script_args)

        result["in_process"] = interleaved(a.repeats, pair)
        result["torch"] = torch.__version__
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    host = "no host ops" if not a.host_ops else "torch.profiler host ops" if a.torch_profiler else "host ops"
    print(f"train_gpt --steps {a.steps}, {a.detail} detail, {host}; {a.repeats} interleaved repeats "
          f"(target: profile / run <= {TARGET:.2f})")
    for key, what in (("commands", "commands (fresh processes)"), ("in_process", "in-process (warm)")):
        for clock_name in ("wall", "cpu") if key in result else ():
            r = result[key][clock_name]
            ok = "ok" if r["ratio_median"] <= TARGET else "OVER TARGET"
            print(f"  {what:27s} {clock_name:4s}  run {r['run_median_s']:7.3f} s  profile "
                  f"{r['profile_median_s']:7.3f} s  ratio {r['ratio_median']:.3f} (median; best-of "
                  f"{r['ratio_best']:.3f})  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
