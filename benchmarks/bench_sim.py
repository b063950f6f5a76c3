"""Simulator-core benchmarks. Ratios are measured side by side in one run (the machine is noisy).

    python benchmarks/bench_sim.py

Targets (issue 2): Numba >= 20x the reference executor on 10,000 small VectorE instructions;
>= 1 G element-ops/s on large elementwise tiles; scheduler >= 1 M instructions/s; and the
first-call time in a fresh process with the disk cache warm.
"""

from __future__ import annotations

import subprocess
import sys
import time

from neuronsim import sim
from neuronsim.sim import AluOp, Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.schedule import run_schedule, schedule_inputs


def vector_program(n_instructions: int, free: int) -> sim.Program:
    b = ProgramBuilder(f"vector_{n_instructions}x{free}")
    x = b.sbuf("x", (128, free), "float32")
    y = b.sbuf("y", (128, free), "float32")
    z = b.sbuf("z", (128, free), "float32")
    b.emit(Opcode.MEMSET, x, value=1.5)
    b.emit(Opcode.MEMSET, y, value=0.25)
    for i in range(n_instructions):
        dst, a = (z, x) if i % 2 == 0 else (x, z)
        b.emit(Opcode.TENSOR_TENSOR, dst, [a, y], op=AluOp.add)
    return b.build()


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_executors() -> None:
    program = vector_program(10_000, 128)
    sim.prepare(program)
    sim.run(program, {}, executor="numba")  # compile / load from cache
    t_numba = best_of(lambda: sim.run(program, {}, executor="numba"))
    t_ref = best_of(lambda: sim.run(program, {}, executor="reference"), repeats=1)
    print(f"executors, 10,000 x tensor_tensor 128x128 fp32: numba {t_numba * 1e3:.1f} ms, "
          f"reference {t_ref * 1e3:.1f} ms, ratio {t_ref / t_numba:.1f}x (target >= 20x)")


def bench_elementwise() -> None:
    program = vector_program(64, 8192)
    sim.run(program, {})
    t = best_of(lambda: sim.run(program, {}))
    ops = 64 * 128 * 8192
    print(f"elementwise, 64 x tensor_tensor 128x8192 fp32: {ops / t / 1e9:.2f} G element-ops/s (target >= 1)")


def bench_scheduler() -> None:
    program = vector_program(200_000, 64)
    chip = get_chip("trn2")
    placement = sim.prepare(vector_program(1, 64)).placement  # same tensors, same placement
    t0 = time.perf_counter()
    inp = schedule_inputs(program, chip, placement)
    t_inputs = time.perf_counter() - t0

    def core():
        run_schedule(inp, 21, 2 + len(program.tensors))
    core()
    t_core = best_of(core)
    n = len(program.instructions)
    print(f"scheduler, {n:,} instructions: {n / t_core / 1e6:.2f} M instructions/s (target >= 1); "
          f"building its inputs (costs, regions) in Python: {n / t_inputs / 1e3:.0f} k instructions/s")


FIRST_CALL = """
import time; t0 = time.perf_counter()
import numpy as np
from neuronsim import sim
from neuronsim.sim import Opcode, ProgramBuilder
b = ProgramBuilder('first'); a = b.hbm('a', (128, 64), 'float32'); s = b.sbuf('s', (128, 64), 'float32')
o = b.hbm('o', (128, 64), 'float32', kind='output')
b.emit(Opcode.DMA_COPY, s, [a]); b.emit(Opcode.DMA_COPY, o, [s])
sim.run(b.build(), {'a': np.ones((128, 64), np.float32)})
print(time.perf_counter() - t0)
"""


def bench_first_call() -> None:
    run = lambda: float(subprocess.check_output([sys.executable, "-c", FIRST_CALL], text=True).split()[-1])  # noqa: E731
    run()  # warm the disk cache
    warm = min(run() for _ in range(2))
    t0 = time.perf_counter()
    subprocess.check_output([sys.executable, "-c", "import numpy"])
    baseline = time.perf_counter() - t0
    print(f"first call in a fresh process, disk cache warm: {warm:.2f} s "
          f"(interpreter + numpy start alone: {baseline:.2f} s)")


if __name__ == "__main__":
    bench_executors()
    bench_elementwise()
    bench_scheduler()
    bench_first_call()
