"""NKI frontend benchmark: tracing speed, and that a second simulate of a signature costs no tracing.

    python benchmarks/bench_tracing.py

"Tracing" is everything between a call and a runnable Program: running the kernel body with
tracer tensors, allocating SBUF/PSUM, and building the IR (``Kernel.specialize`` on a cold
cache). Each kernel is traced ``--repeats`` times with a fresh cache and the best time is kept
(the machine is shared and noisy), in wall time and in the thread's CPU time (what a busy machine
changes least: compare trees by it). Target (issue 3): >= 20,000 instructions/s.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "nki"))

import attention  # noqa: E402
import matmul  # noqa: E402
import softmax  # noqa: E402
import tensor_add  # noqa: E402

import neuronsim.nki as nki  # noqa: E402


def cases():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 1024), dtype=np.float32)
    return [
        ("matmul_naive 2048x2048x2048", matmul.matmul_naive, matmul.inputs(K=2048, M=2048, N=2048)),
        ("matmul_blocked 2048x2048x2048", matmul.matmul_blocked, matmul.inputs(K=2048, M=2048, N=2048)),
        ("attention_fwd S=2048 d=128", attention.attention_fwd, attention.inputs(seq=2048, d=128)),
        ("softmax 8192x1024", softmax.softmax_nl, (x,)),
        ("tensor_add 8192x1024", tensor_add.tensor_add, (x, x)),
    ]


def trace_rate(kernel, args, repeats: int) -> tuple[int, float, float]:
    """(instructions, best wall seconds, best thread CPU seconds) of tracing ``kernel`` afresh."""
    best = best_cpu = float("inf")
    n = 0
    for _ in range(repeats):
        fresh = nki.jit(kernel.fn)
        gc.collect()  # start each repeat without the previous one's garbage
        t0, c0 = time.perf_counter(), time.thread_time()
        traced = fresh.specialize(args)
        best_cpu = min(best_cpu, time.thread_time() - c0)
        best = min(best, time.perf_counter() - t0)
        n = traced.instructions
    return n, best, best_cpu


def cached_call(kernel, args) -> tuple[int, float, float]:
    """(traces after two simulates, first-call seconds, second-call seconds)."""
    fresh = nki.jit(kernel.fn)
    run = nki.simulate(fresh)
    t0 = time.perf_counter()
    run(*args)
    t1 = time.perf_counter()
    run(*args)
    t2 = time.perf_counter()
    return fresh.traces, t1 - t0, t2 - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    total_n, total_t, total_cpu = 0, 0.0, 0.0
    for name, kernel, args in cases():
        n, t, cpu = trace_rate(kernel, args, opts.repeats)
        total_n += n
        total_t += t
        total_cpu += cpu
        print(f"trace {name}: {n:,} instructions in {t * 1e3:.1f} ms = {n / t:,.0f} instructions/s; "
              f"CPU {cpu * 1e3:.1f} ms = {n / cpu:,.0f} instructions per CPU second")
    print(f"tracing overall: {total_n / total_t:,.0f} instructions/s (target >= 20,000); "
          f"CPU: {total_n / total_cpu:,.0f} instructions per CPU second")
    name, kernel, args = cases()[3]
    traces, first, second = cached_call(kernel, args)
    print(f"simulate twice, {name}: traced {traces} time(s); first call {first * 1e3:.1f} ms "
          f"(trace + schedule + run), second {second * 1e3:.1f} ms (run only)")


if __name__ == "__main__":
    main()
