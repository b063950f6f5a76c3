"""SPMD and loops: ``nl.program_id`` / ``num_programs`` / ``program_ndim``, and the ranges.

Loops are Python loops, so they unroll at trace time; ``affine_range`` tiles get rotating buffers
(``allocate.py``). A loop whose bounds or condition are registers (``nisa.register_alloc``) runs on
the device: its body is traced once between branch instructions (``isa/registers.py``).
"""

from __future__ import annotations

import contextlib
import math

from neuronsim.errors import OutOfBoundsError
from neuronsim.nki.trace import caller_location, current_trace, loop

# ---------------------------------------------------------------- SPMD


def program_id(axis=0) -> int:
    """Index of this SPMD instance along ``axis`` of the launch grid."""
    pid = current_trace().program_id
    if not -len(pid) <= int(axis) < len(pid):
        raise OutOfBoundsError(f"nl.program_id({axis}): the launch grid has {len(pid)} "
                               f"dimension(s) {tuple(current_trace().grid)}", location=caller_location())
    return pid[int(axis)]


def num_programs(axes=None) -> int:
    grid = current_trace().grid
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, int):
        return grid[axes]
    return math.prod(grid[a] for a in axes)


def program_ndim() -> int:
    return len(current_trace().grid)


# ---------------------------------------------------------------- loops


def affine_range(start, stop=None, step=1):
    """Loop iterations with no carried dependency: unrolled, and their tiles get rotating buffers."""
    return loop("affine", start, stop, step)


def sequential_range(start, stop=None, step=1):
    """Loop with a carried dependency: unrolled, iterations share buffers as liveness allows; on
    the device when a bound is a register."""
    if _on_registers(start, stop):
        return _device_loop(start, stop, step, "sequential_range")
    return loop("sequential", start, stop, step)


def static_range(start, stop=None, step=1):
    """Fully unrolled loop."""
    return loop("static", start, stop, step)


def plain_range(start, stop=None, step=1):
    """``nl.range``: a Python range, unrolled (nki-library's mxfp_load uses the name; it is not in
    the NKI 0.6 stubs, and NKI 0.7 makes the static iterators plain Python ranges)."""
    return loop("static", start, stop, step)


def dynamic_range(start, stop=None, step=1):
    """A loop run by the device with bounds that may be registers; the loop variable is a register.
    Constant bounds give the same values unrolled (as ``sequential_range``)."""
    if _on_registers(start, stop):
        return _device_loop(start, stop, step, "dynamic_range")
    return loop("sequential", start, stop, step)


def fori_loop(lower, upper, body_fun, step=1):
    """``body_fun(i)`` for ``i`` in ``range(lower, upper, step)``; with a register bound the loop runs
    on the device and ``i`` is a register passed by value. Returns None."""
    if _on_registers(lower, upper):
        for i in _device_loop(lower, upper, step, "fori_loop", fresh_induction=True):
            body_fun(i)
    else:
        for i in sequential_range(lower, upper, step):
            body_fun(i)


def while_loop(init, body_fun, *legacy):
    """While the register ``init`` is nonzero: ``r = body_fun(r)`` (the body gets the condition
    register and returns the next one), on the device. The Python form ``while_loop(cond_fun,
    body_fun, init_val)`` runs ``cond_fun`` at trace time and unrolls."""
    if callable(init):
        cond_fun, (val,) = init, legacy
        while cond_fun(val):
            val = body_fun(val)
        return val
    from neuronsim.nki.isa.registers import while_register

    while_register(init, body_fun, "while_loop", caller_location())
    return None


def _on_registers(start, stop) -> bool:
    from neuronsim.nki.isa.registers import VirtualRegister

    return isinstance(start, VirtualRegister) or isinstance(stop, VirtualRegister)


def _device_loop(start, stop, step, fn: str, fresh_induction: bool = False):
    from neuronsim.nki.isa.registers import dynamic_loop

    if stop is None:
        start, stop = 0, start
    return dynamic_loop(start, stop, step, fn, caller_location(), fresh_induction)


@contextlib.contextmanager
def no_reorder():
    """Program order is kept by construction here (each engine issues its stream in order)."""
    yield
