"""Compiling the simulator's machine code ahead of time (``neuronsim warmup``).

Numba compiles the executor and the scheduler on first use and keeps the machine code in its disk
cache (``_numba_cache``: one directory per version of these sources). The compile units are the
executor's loop, the scheduler, one kernel per opcode (``execute_numba``) and the bundle of the
common kernels (``kernel_bundle``); a process compiles only the units its Programs use — the tiered
executor in a worker process (``tiers.py``), which calls :func:`warm` — when they first use them.
Warming up compiles every unit, so that a CI cache or a container image holds everything before the
first real kernel.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from neuronsim.sim import execute_numba, kernel_bundle, schedule
from neuronsim.sim._numba_cache import cache_dir
from neuronsim.sim.chips import get_chip
from neuronsim.sim.ir import Opcode, Program, ProgramBuilder
from neuronsim.sim.memory.layout import place_tensors


@dataclass(frozen=True)
class WarmupUnit:
    name: str
    what: str  # what it compiles
    compile: Callable[[], None] | None = None  # compiles it (the loop, the scheduler)
    opcode: Opcode | None = None  # else: the kernel of this opcode


@dataclass(frozen=True)
class WarmupResult:
    unit: str
    seconds: float
    compiled: int  # functions Numba compiled (0: everything came from the cache)
    loaded: int  # functions Numba loaded from the cache


def _dma_program() -> Program:
    b = ProgramBuilder("warmup_dma")
    src = b.hbm("src", (128, 64), "float32")
    tile = b.sbuf("tile", (128, 64), "bfloat16")
    out = b.hbm("out", (128, 64), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, tile, [src], location="warmup:dma")
    b.emit(Opcode.DMA_COPY, out, [tile], location="warmup:dma")
    return b.build()


def _compile_loop() -> None:
    """The loop, for the argument types every run passes (``execute``'s arrays), stopping at once
    (no kernel is called: the one row's opcode has no entry)."""
    itab = np.zeros((1, 1), np.int64)
    itab[0, 0] = len(execute_numba.ENTRIES)  # past every opcode: its entry is read as 0 below
    entries = np.zeros(len(execute_numba.ENTRIES) + 1, np.int64)
    execute_numba.run_encoded(itab, np.zeros((1, 1)), np.zeros(1, np.int64), entries, 0)


def _compile_branch_loop() -> None:
    """The loop of Programs with branches (``run_branching``), likewise stopping at once."""
    itab = np.zeros((1, 1), np.int64)
    itab[0, 0] = len(execute_numba.ENTRIES)
    entries = np.zeros(len(execute_numba.ENTRIES) + 1, np.int64)
    execute_numba.run_branching(itab, np.zeros((1, 1)), np.zeros(3, np.int64), entries, 0,
                                np.zeros((1, 2), np.int64), 0)


def _compile_scheduler() -> None:
    program = _dma_program()
    schedule.schedule_program(program, get_chip("trn2"), place_tensors(program, get_chip("trn2")))


UNITS: tuple[WarmupUnit, ...] = (
    WarmupUnit("loop", "the executor's loop", compile=_compile_loop),
    WarmupUnit("branch_loop", "the executor's loop for Programs with branches", compile=_compile_branch_loop),
    WarmupUnit("scheduler", "the scheduler", compile=_compile_scheduler),
    *(WarmupUnit(op.name.lower(), f"the {op.name} kernel", opcode=op) for op in Opcode),
    # last: linked from the kernels above, once they are cached
    WarmupUnit(kernel_bundle.UNIT, "the common kernels in one unit", compile=kernel_bundle.build),
)


def _dispatchers() -> list:
    """Every Numba dispatcher in the simulator's loaded modules (for their cache statistics)."""
    found = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("neuronsim.sim") or module is None:
            continue
        for value in vars(module).values():
            stats = getattr(value, "stats", None)
            if stats is not None and hasattr(stats, "cache_misses") and hasattr(value, "py_func"):
                found[id(value)] = value
    return list(found.values())


def _counts() -> tuple[int, int]:
    compiled = loaded = 0
    for d in _dispatchers():
        compiled += sum(d.stats.cache_misses.values())
        loaded += sum(d.stats.cache_hits.values())
    return compiled, loaded


def warm(unit: WarmupUnit) -> WarmupResult:
    """Compile (or load) the unit in this thread; report what Numba compiled or loaded."""
    compiled0, loaded0 = _counts()
    start = time.perf_counter()
    if unit.opcode is not None:
        execute_numba.load_kernel(unit.opcode)
    else:
        unit.compile()
    seconds = time.perf_counter() - start
    compiled1, loaded1 = _counts()
    return WarmupResult(unit.name, seconds, compiled1 - compiled0, loaded1 - loaded0)


def warm_all(units: Iterable[WarmupUnit] = UNITS) -> list[WarmupResult]:
    return [warm(unit) for unit in units]


__all__ = ["UNITS", "WarmupResult", "WarmupUnit", "cache_dir", "warm", "warm_all"]
