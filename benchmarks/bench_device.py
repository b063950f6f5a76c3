"""Emulated ``neuron`` device vs CPU, measured side by side in one run (this machine is shared
and noisy: compare the ratios). Prints per-op dispatch overhead and the train_gpt step time.

    python benchmarks/bench_device.py [--steps 20] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import neuronsim

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gpt  # noqa: E402

OPS = {
    "a + b": lambda a, b: a + b,
    "a.add_(b)": lambda a, b: a.add_(b),
    "a @ b": lambda a, b: a @ b,
    "a.t() (view)": lambda a, b: a.t(),
    "a.view(-1)": lambda a, b: a.view(-1),
    "a.sum()": lambda a, b: a.sum(),
    "torch.empty_like(a)": lambda a, b: torch.empty_like(a),
    "a[0, 0].item()": lambda a, b: a[0, 0].item(),
    "_foreach_add_ (2 tensors)": lambda a, b: torch._foreach_add_([a, b], [b, a]),
}
GPT_ARGS = ["--batch", "16", "--block", "64", "--embd", "128", "--heads", "4", "--layers", "2", "--quiet"]


def time_op(fn, device: str, number: int, repeats: int) -> float:
    """Best per-call time in microseconds, as CPU time of this thread (robust to a busy machine)."""
    a = torch.randn(16, 16, device=device)
    b = torch.randn(16, 16, device=device)
    for _ in range(number // 10):
        fn(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(number):
            fn(a, b)
        best = min(best, (time.thread_time() - start) / number)
    return best * 1e6


def bench_ops(number: int, repeats: int) -> list[dict]:
    rows = []
    for name, fn in OPS.items():
        cpu = time_op(fn, "cpu", number, repeats)
        neuron = time_op(fn, "neuron", number, repeats)
        rows.append({"op": name, "cpu_us": cpu, "neuron_us": neuron, "ratio": neuron / cpu})
    return rows


def bench_gpt(steps: int, repeats: int) -> dict:
    """Median step time per device, runs interleaved so machine noise hits both alike. Wall time
    and process CPU time (all threads: backward runs on torch's device thread) are both kept; on
    a loaded machine the CPU-time ratio is the steadier one."""
    setups = {}
    for device in ("cpu", "neuron"):
        args = train_gpt.parse_args([*GPT_ARGS, "--device", device, "--steps", str(steps)])
        model, optimizer, schedule, batches = train_gpt.build(args)
        batches = [(x.to(device), y.to(device)) for x, y in batches]
        setups[device] = (model, optimizer, schedule, batches)
    wall: dict[str, list[float]] = {"cpu": [], "neuron": []}
    cpu_time: dict[str, list[float]] = {"cpu": [], "neuron": []}

    def run(device: str, n: int) -> tuple[float, float]:
        model, optimizer, schedule, batches = setups[device]
        start, start_cpu = time.perf_counter(), time.process_time()
        for step in range(n):
            idx, targets = batches[step % len(batches)]
            loss = train_gpt.train_step(model, optimizer, schedule, idx, targets)
        loss.item()
        return (time.perf_counter() - start) / n, (time.process_time() - start_cpu) / n

    for device in setups:
        run(device, 3)  # warm-up
    for _ in range(repeats):
        for device in setups:
            w, c = run(device, steps)
            wall[device].append(w)
            cpu_time[device].append(c)
    med = {k: statistics.median(v) * 1e3 for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) * 1e3 for k, v in cpu_time.items()}
    return {
        "cpu_ms": med["cpu"],
        "neuron_ms": med["neuron"],
        "ratio": med["neuron"] / med["cpu"],
        "cpu_cpu_ms": med_cpu["cpu"],
        "neuron_cpu_ms": med_cpu["neuron"],
        "cpu_time_ratio": med_cpu["neuron"] / med_cpu["cpu"],
        "config": " ".join(GPT_ARGS),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="train_gpt steps per timed run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--number", type=int, default=2000, help="calls per per-op timing")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both devices)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    neuronsim.enable()
    ops = bench_ops(args.number, args.repeats)
    gpt = bench_gpt(args.steps, args.repeats)
    if args.json:
        print(json.dumps({"ops": ops, "train_gpt": gpt}, indent=2))
        return
    print(f"Per-op dispatch overhead, 16x16 fp32, thread CPU time, best of {args.repeats}")
    print(f"{'op':<28}{'cpu us':>10}{'neuron us':>12}{'ratio':>8}{'overhead us':>13}")
    for r in ops:
        overhead = r["neuron_us"] - r["cpu_us"]
        print(f"{r['op']:<28}{r['cpu_us']:>10.2f}{r['neuron_us']:>12.2f}{r['ratio']:>8.1f}{overhead:>13.2f}")
    print(f"\ntrain_gpt step ({gpt['config']}), median of {args.repeats} x {args.steps} steps")
    wall = f"wall      cpu {gpt['cpu_ms']:8.2f} ms   neuron {gpt['neuron_ms']:8.2f} ms"
    print(f"{wall}   ratio {gpt['ratio']:.2f}")
    print(
        f"cpu time  cpu {gpt['cpu_cpu_ms']:8.2f} ms   neuron {gpt['neuron_cpu_ms']:8.2f} ms   "
        f"ratio {gpt['cpu_time_ratio']:.2f}   (target: ratio <= 2)"
    )


if __name__ == "__main__":
    main()
