"""Compiling the simulator's machine code ahead of time (``neuronsim warmup``).

Numba compiles the executor and the scheduler on first use and keeps the machine code in its disk
cache (``_numba_cache``: one directory per version of these sources). The executor's compile units
are its loop and one kernel per opcode (``execute_numba``); a process compiles only the units its
Programs use, when they first use them. Warming up compiles every unit, so that a CI cache or a
container image holds everything before the first real kernel: the ``executor`` unit runs one small
Program (the loop, the scheduler, the DMA kernel), then each opcode's unit loads its kernel.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from neuronsim.sim import api, execute_numba
from neuronsim.sim._numba_cache import cache_dir
from neuronsim.sim.ir import Opcode, Program, ProgramBuilder


@dataclass(frozen=True)
class WarmupUnit:
    name: str
    what: str  # what it compiles
    build: Callable[[], Program] | None = None  # a Program to run (the loop and the scheduler)
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


UNITS: tuple[WarmupUnit, ...] = (
    WarmupUnit("executor", "the executor's loop, the scheduler and the DMA kernel", build=_dma_program),
    *(WarmupUnit(op.name.lower(), f"the {op.name} kernel", opcode=op) for op in Opcode),
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


def _inputs(program: Program) -> dict[str, np.ndarray]:
    return {t.name: np.zeros(t.shape, t.dtype.numpy) for t in program.hbm_tensors() if t.kind == "input"}


def warm(unit: WarmupUnit, chip: str = "trn2") -> WarmupResult:
    """Run the unit's Program on the Numba executor; report what Numba compiled or loaded."""
    compiled0, loaded0 = _counts()
    start = time.perf_counter()
    if unit.opcode is not None:
        execute_numba.load_kernel(unit.opcode)
    else:
        program = unit.build()
        api.run(program, _inputs(program), chip, executor="numba", uninitialized_memory="zero")
    seconds = time.perf_counter() - start
    compiled1, loaded1 = _counts()
    return WarmupResult(unit.name, seconds, compiled1 - compiled0, loaded1 - loaded0)


def warm_all(units: Iterable[WarmupUnit] = UNITS, chip: str = "trn2") -> list[WarmupResult]:
    return [warm(unit, chip) for unit in units]


__all__ = ["UNITS", "WarmupResult", "WarmupUnit", "cache_dir", "warm", "warm_all"]
