"""Multi-core synchronization, the target version, and the calls that are not simulated."""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.nki.isa.common import (
    _fail,
)
from neuronsim.nki.isa.enums import (
    engine,
    nc_version,
)
from neuronsim.nki.trace import caller_location, current_trace


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Synchronize the cores of an LNC=2 launch: every core finishes what came before before any goes on."""
    trace = current_trace()
    if tuple(cores) != (0, 1):
        raise _fail("core_barrier", f"cores={cores}; only (0, 1) is supported")
    trace.barriers.append(len(trace.records))


def get_nc_version():
    """The nc_version of the chip being traced for (gen3 = trn2, gen4 = trn3)."""
    return nc_version(current_trace().chip.nki_target)


def get_nc_sub_version() -> int:
    """The silicon revision within the nc_version generation: 0, the first revision (the documented
    default; the simulated chips model first revisions)."""
    current_trace()  # like get_nc_version, a question about the kernel being traced
    return 0


class NkiInstruction:
    """Opaque handle to a traced instruction (the type of AWS's ``nisa`` results). The simulator
    orders instructions by the bytes they touch; ``nisa`` calls here return None, so no handle
    reaches ``depends_on``."""

    def __init__(self, handle=None):
        self.handle = handle

    def depends_on(self, *producers):
        raise UnsupportedError("NkiInstruction.depends_on: explicit scheduling edges are not simulated",
                               location=caller_location())


class VirtualRegister:
    """A virtual register on an engine (``nisa.register_alloc``). As under NKI's tracer frontend, its
    value is unknown while the kernel is built: Python control flow on it is a TypeError."""

    def __init__(self, state=None, frozen=False):
        self.state, self.frozen = state, frozen

    def __bool__(self):
        raise TypeError("a VirtualRegister's value is not known while the kernel is traced; use "
                        "nl.fori_loop / while_loop for loops on registers")

    __int__ = __index__ = __bool__


def _unsupported(fn: str):
    def call(*args, **kwargs):
        raise UnsupportedError(
            f"nisa.{fn} is not simulated by neuronsim (it has no instruction in the IR, docs/ir.md)",
            instruction=f"nisa.{fn}",
            location=caller_location(),
        )

    call.__name__ = fn
    call.__qualname__ = fn
    call.__doc__ = f"Not simulated: raises UnsupportedError (``nisa.{fn}`` has no IR instruction)."
    return call


NOT_SIMULATED = (
    "nc_matmul_mx",
    "activate2",
    "tensor_scalar_cumulative",
    "local_gather",
    "nc_n_gather",
    "nc_stream_shuffle",
    "rand_set_state",
    "rand_get_state",
    "rand2",
    "exponential",
    "sequence_bounds",
    "dma_compute",
    "quantize_mx",
    "range_select",
    "sendrecv",
    "register_alloc",
    "register_move",
    "register_load",
    "register_store",
    "nc_match_replace8",
    "nonzero_with_count",
    "topk",
)
for _fn in NOT_SIMULATED:
    globals()[_fn] = _unsupported(_fn)
del _fn
