"""SPMD and loops: ``nl.program_id`` / ``num_programs`` / ``program_ndim``, and the ranges.

Loops are Python loops, so they unroll at trace time; ``affine_range`` tiles get rotating buffers
(``allocate.py``).
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
    """Loop with a carried dependency: unrolled, iterations share buffers as liveness allows."""
    return loop("sequential", start, stop, step)


def static_range(start, stop=None, step=1):
    """Fully unrolled loop."""
    return loop("static", start, stop, step)


dynamic_range = sequential_range  # deprecated in 0.6; static bounds unroll to the same program


def fori_loop(lower, upper, body_fun, init_val):
    val = init_val
    for i in sequential_range(lower, upper):
        val = body_fun(i, val)
    return val


def while_loop(cond_fun, body_fun, init_val):
    val = init_val
    while cond_fun(val):
        val = body_fun(val)
    return val


@contextlib.contextmanager
def no_reorder():
    """Program order is kept by construction here (each engine issues its stream in order)."""
    yield
