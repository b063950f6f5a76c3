"""Compiling the simulator's machine code ahead of time (``neuronsim warmup``).

Numba compiles the executor and the scheduler on first use and keeps the machine code in its disk
cache (``_numba_cache``: one directory per version of these sources). Warming up runs one small
Program per *compile unit*, so that a CI cache or a container image holds everything before the
first real kernel. A unit names what it compiles and builds a Program that makes Numba compile it.
Today the executor is one compiled function for every opcode, so the first unit compiles it all
and the others load it; when compilation is split by instruction family, each family is a unit
here and nothing else changes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from neuronsim.sim import api
from neuronsim.sim._numba_cache import cache_dir
from neuronsim.sim.ir import Engine, Opcode, Program, ProgramBuilder


@dataclass(frozen=True)
class WarmupUnit:
    name: str
    what: str  # what running its Program compiles
    build: Callable[[], Program]


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


def _matmul_program() -> Program:
    b = ProgramBuilder("warmup_matmul")
    stationary = b.hbm("stationary", (128, 128), "bfloat16")
    moving = b.hbm("moving", (128, 64), "bfloat16")
    out = b.hbm("out", (128, 64), "float32", kind="output")
    s = b.sbuf("s", (128, 128), "bfloat16")
    m = b.sbuf("m", (128, 64), "bfloat16")
    acc = b.psum("acc", (128, 64), "float32")
    res = b.sbuf("res", (128, 64), "float32")
    b.emit(Opcode.DMA_COPY, s, [stationary], location="warmup:matmul")
    b.emit(Opcode.DMA_COPY, m, [moving], location="warmup:matmul")
    b.emit(Opcode.NC_MATMUL, acc, [s, m], accumulate=False, location="warmup:matmul")
    b.emit(Opcode.TENSOR_COPY, res, [acc], engine=Engine.VECTOR, location="warmup:matmul")
    b.emit(Opcode.DMA_COPY, out, [res], location="warmup:matmul")
    return b.build()


UNITS: tuple[WarmupUnit, ...] = (
    WarmupUnit("executor", "the Numba executor (every opcode) and the scheduler", _dma_program),
    WarmupUnit("tensor", "TensorE matmul and PSUM evacuation", _matmul_program),
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
    program = unit.build()
    api.run(program, _inputs(program), chip, executor="numba", uninitialized_memory="zero")
    seconds = time.perf_counter() - start
    compiled1, loaded1 = _counts()
    return WarmupResult(unit.name, seconds, compiled1 - compiled0, loaded1 - loaded0)


def warm_all(units: Iterable[WarmupUnit] = UNITS, chip: str = "trn2") -> list[WarmupResult]:
    return [warm(unit, chip) for unit in units]


__all__ = ["UNITS", "WarmupResult", "WarmupUnit", "cache_dir", "warm", "warm_all"]
