"""``torch.compile(backend="neuron")`` vs eager on examples/train_gpt.py, side by side in one run
(this machine is shared and noisy: compare the ratios). Prints the first step's host time (eager:
kernel tracing, and loading the simulator's machine code from its disk cache; compiled: Dynamo +
AOTAutograd + fusion + tracing), the steady-state host step time, each also in process CPU time
(what a busy machine changes least), and per step the simulated device time, native kernel launches
and HBM bytes they move. Each case starts from a full garbage collection, so that its first step
pays for the collections its own objects cause, not for garbage left by the imports or the case
before (where a full collection of the whole heap, ~0.15 s, fell was luck: one more or one fewer
moved the first step by 10-15%).

    python benchmarks/bench_compile.py [--steps 6] [--json] [train_gpt options, e.g. --layers 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._dynamo

import neuronsim  # noqa: F401  (registers the device)
from neuronsim.device import clock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gpt  # noqa: E402


def measure(compiled: bool, steps: int, extra: list[str]) -> dict:
    torch._dynamo.reset()
    flags = ["--steps", str(steps), "--quiet", *extra, *(["--compile"] if compiled else [])]
    args = train_gpt.parse_args(flags)
    model, optimizer, schedule, batches = train_gpt.build(args)
    gc.collect()
    host, cpu, device, kernels, nbytes, losses = [], [], [], [], [], []
    for step in range(steps):
        for c in clock.all_clocks().values():
            c.reset()
        idx, targets = (t.to("neuron") for t in batches[step % len(batches)])
        start, start_cpu = time.perf_counter(), time.process_time()
        losses.append(train_gpt.train_step(model, optimizer, schedule, idx, targets).item())
        cpu.append(time.process_time() - start_cpu)
        host.append(time.perf_counter() - start)
        events = [e for c in clock.all_clocks().values() for e in c.events() if e.kind not in ("h2d", "d2h")]
        device.append(sum(e.duration_ns for e in events) / 1e3)
        kernels.append(sum(e.kind == "kernel" for e in events))
        nbytes.append(sum(e.bytes for e in events if e.kind == "kernel"))
    steady = slice(1, None)
    return {"first_step_s": host[0], "first_step_cpu_s": cpu[0],
            "host_step_ms": 1e3 * statistics.median(host[steady]),
            "host_step_cpu_ms": 1e3 * statistics.median(cpu[steady]),
            "device_us_per_step": device[-1], "kernels_per_step": kernels[-1],
            "hbm_bytes_per_step": nbytes[-1], "losses": losses}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--json", action="store_true")
    args, extra = parser.parse_known_args(argv)
    eager = measure(False, args.steps, extra)
    compiled = measure(True, args.steps, extra)
    if args.json:
        print(json.dumps({"eager": eager, "compiled": compiled}, indent=2))
        return
    print(f"{'':24s} {'eager':>12s} {'compiled':>12s} {'compiled/eager':>15s}")
    keys = ("first_step_s", "first_step_cpu_s", "host_step_ms", "host_step_cpu_ms", "device_us_per_step",
            "kernels_per_step", "hbm_bytes_per_step")
    for key in keys:
        e, c = eager[key], compiled[key]
        digits = 3 if key.endswith("_s") else 1  # seconds: ms are the noise
        print(f"{key:24s} {e:12.{digits}f} {c:12.{digits}f} {c / e:15.3f}")
    drift = max(abs(a - b) for a, b in zip(eager["losses"], compiled["losses"], strict=True))
    print(f"max |loss compiled - loss eager| over {args.steps} steps: {drift:.2e}")


if __name__ == "__main__":
    main()
