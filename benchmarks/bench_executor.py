"""Where the exact-numerics executor spends a train_gpt step (bench_device's config): the time of
each kernel Program's Numba call, and with ``--per-op`` of each instruction class (opcode, with
the activation function, and the destination dtype).

Per-op timing runs every instruction as its own executor call (their ~0.4 us call overhead is
subtracted); that disturbs caches a little, so the per-op total exceeds the per-kernel one. This
machine is shared and noisy: compare shares, not milliseconds between runs.

    python benchmarks/bench_executor.py [--steps 3] [--per-op] [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np
import torch

import neuronsim
from neuronsim.device.native.entry import Entry
from neuronsim.options import options
from neuronsim.sim import execute_numba
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, N_FLOAT_IMM, ROW_WIDTH
from neuronsim.sim.ir import ActFunc, Opcode
from neuronsim.sim.memory.access import F_DTYPE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gpt  # noqa: E402
from bench_device import GPT_ARGS  # noqa: E402


def instruction_class(row: np.ndarray) -> str:
    op = Opcode(int(row[0]))
    name = f"ACTIVATION.{ActFunc(int(row[IMM])).name}" if op is Opcode.ACTIVATION else op.name
    return f"{name}[{DType(int(row[DST + F_DTYPE])).name}]"


def call_overhead_ns() -> int:
    """Median cost of an executor call on one row that runs nothing (no entry for its opcode)."""
    row = np.zeros((1, ROW_WIDTH), np.int64)
    frow, bases = np.zeros((1, N_FLOAT_IMM)), np.zeros(1, np.int64)
    no_entries = np.zeros_like(execute_numba.ENTRIES)
    execute_numba.run_encoded(row, frow, bases, no_entries, 0)
    samples = []
    for _ in range(2000):
        start = time.perf_counter_ns()
        execute_numba.run_encoded(row, frow, bases, no_entries, 0)
        samples.append(time.perf_counter_ns() - start)
    return int(np.median(samples))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--per-op", action="store_true", help="also time each instruction class")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    neuronsim.enable()
    gpt = train_gpt.parse_args([*GPT_ARGS, "--device", "neuron", "--steps", str(args.steps)])
    model, optimizer, schedule, batches = train_gpt.build(gpt)
    batches = [(x.to("neuron"), y.to("neuron")) for x, y in batches]

    current = [""]
    entry_run = Entry.run

    def run(self, a, k, opts=None):
        current[0] = self.name
        return entry_run(self, a, k, opts)

    kernel_ns, kernel_calls = collections.Counter(), collections.Counter()
    op_ns, op_count = collections.Counter(), collections.Counter()
    overhead = call_overhead_ns() if args.per_op else 0
    execute = execute_numba.execute

    def timed(itab, ftab, bases, program=None, pitch=None, start=0):
        began = time.perf_counter_ns()
        if args.per_op:
            for i in range(start, itab.shape[0]):
                t0 = time.perf_counter_ns()
                execute(itab[i:i + 1], ftab[i:i + 1], bases)
                key = instruction_class(itab[i])
                op_ns[key] += time.perf_counter_ns() - t0 - overhead
                op_count[key] += 1
            stopped = -1
        else:
            stopped = execute(itab, ftab, bases, program, pitch, start)
        kernel_ns[current[0]] += time.perf_counter_ns() - began
        kernel_calls[current[0]] += 1
        return stopped

    direct_runner = execute_numba.direct_runner
    # every Program call through ``timed`` (an entry's launch record would call the loop directly)
    Entry.run, execute_numba.execute, execute_numba.direct_runner = run, timed, lambda *a: None
    try:
        with options(numerics="exact"):
            for step in range(3):  # warm-up: traces, schedules and compiles every signature
                train_gpt.train_step(model, optimizer, schedule, *batches[step % len(batches)])
            for counter in (kernel_ns, kernel_calls, op_ns, op_count):
                counter.clear()
            start = time.perf_counter()
            for step in range(args.steps):
                loss = train_gpt.train_step(model, optimizer, schedule, *batches[step % len(batches)])
            loss.item()
            step_ms = (time.perf_counter() - start) / args.steps * 1e3
    finally:
        Entry.run, execute_numba.execute, execute_numba.direct_runner = entry_run, execute, direct_runner
    n = args.steps
    total = sum(kernel_ns.values()) / n / 1e6
    print(f"train_gpt step ({' '.join(GPT_ARGS)}): {step_ms:.1f} ms, executor {total:.1f} ms "
          f"({sum(kernel_calls.values()) // n} Program calls per step)")
    print(f"{'ms/step':>9} {'share':>6} {'calls':>6}  kernel")
    for name, ns in kernel_ns.most_common(args.top):
        print(f"{ns / n / 1e6:9.2f} {ns / n / 1e6 / total:6.1%} {kernel_calls[name] // n:6d}  {name}")
    if args.per_op:
        op_total = sum(op_ns.values()) / n / 1e6
        print(f"\nper instruction class, total {op_total:.1f} ms/step "
              f"(call overhead {overhead} ns subtracted)")
        print(f"{'ms/step':>9} {'share':>6} {'count':>6}  class")
        for name, ns in op_ns.most_common(args.top):
            print(f"{ns / n / 1e6:9.2f} {ns / n / 1e6 / op_total:6.1%} {op_count[name] // n:6d}  {name}")


if __name__ == "__main__":
    main()
