"""The NeuronCore simulator: IR, chips, memories, engines, scheduler and executors.

This package never imports torch, click or rich.

    from neuronsim import sim
    result = sim.run(program, {"a": a, "b": b}, chip="trn2")
    result.outputs["out"], result.timeline.total_ns
"""

from neuronsim.sim._numba_cache import neuronsim_cache_dir

with neuronsim_cache_dir():
    # Every module defining Numba functions is imported here, inside the cache context.
    from neuronsim.sim import engines, execute_numba, kernel_bundle, schedule  # noqa: F401
    from neuronsim.sim.memory import access, copy, numerics  # noqa: F401


def _guard_compiles() -> None:
    """Processes sharing a cache compile one at a time (``_numba_cache.compile_lock``)."""
    import sys

    from neuronsim.sim import _numba_cache
    from neuronsim.sim.engines import OPDEFS

    modules = [m for name, m in list(sys.modules.items()) if name.startswith("neuronsim.sim.") and m]
    labels = {id(d.kernel): f"{op.name.lower()} kernel" for op, d in OPDEFS.items()}
    _numba_cache.guard_compiles(_numba_cache.dispatchers_of(modules), labels)


_guard_compiles()

from neuronsim.sim.api import Prepared, RunResult, prepare, run  # noqa: E402
from neuronsim.sim.ir import (  # noqa: E402
    AccessPattern,
    ActFunc,
    AluOp,
    Engine,
    Instruction,
    Memory,
    Opcode,
    Program,
    ProgramBuilder,
    TensorDecl,
)

__all__ = [
    "AccessPattern", "ActFunc", "AluOp", "Engine", "Instruction", "Memory", "Opcode", "Prepared",
    "Program", "ProgramBuilder", "RunResult", "TensorDecl", "prepare", "run",
]
