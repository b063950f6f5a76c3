"""Tracing a kernel for one signature: a :class:`TracedKernel`, its Programs per SPMD instance.

The kernel body runs once per instance of the launch grid (``nl.program_id`` is a constant in
each) with tracer tensors for its array arguments; each trace is allocated (``allocate.py``) and
built into Programs, one per ``core_barrier`` phase (``build.py``). ``kernel.py`` caches the result
per signature; ``launch.py`` runs it.
"""

from __future__ import annotations

import gc
import inspect
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from neuronsim.errors import ConstraintError
from neuronsim.nki.allocate import allocate
from neuronsim.nki.build import build_programs
from neuronsim.nki.language import NkiTensor
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import Trace, tracing
from neuronsim.nki.types import DTYPES, to_sim_dtype
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.ir import Memory, Program


@dataclass
class Instance:
    """One SPMD instance of a traced kernel: its Programs (one per ``core_barrier`` phase)."""

    program_id: tuple[int, ...]
    programs: list[Program]
    prints: list[tuple[str, str]]  # (prefix, HBM tensor name)
    matmul_flops: int
    transpose_flops: int
    rotation: dict


@dataclass
class TracedKernel:
    """A kernel traced for one signature: its instances' Programs and how to bind and read HBM."""

    name: str
    chip: ChipSpec
    grid: tuple[int, ...]
    instances: list[Instance]
    arg_names: list[str | None]  # HBM tensor name of each positional array argument (None: a constant)
    returns: object  # the kernel's return structure with output tensor names in place of tensors
    shared: dict[str, tuple[tuple[int, ...], np.dtype, str]]  # name -> (shape, numpy dtype, kind)
    constants: dict[str, np.ndarray]
    fills: dict[str, float]
    trace_seconds: float
    instructions: int = 0
    info: dict = field(default_factory=dict)


def is_array(x) -> bool:
    """A kernel argument that is an array: a numpy array or a torch tensor."""
    return isinstance(x, np.ndarray) or is_torch(x)


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def trace_kernel(fn, name: str, location: str | None, grid: tuple[int, ...], items, bound,
                 chip: ChipSpec) -> TracedKernel:
    """Trace ``fn`` on the arguments ``items`` ((name, value) pairs, ``bound`` to its signature or
    None) for every instance of ``grid`` on ``chip``."""
    # Tracing allocates many small objects and frees none: the cycle collector only costs time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _trace_all(fn, name, location, grid, items, bound, chip)
    finally:
        if collecting:
            gc.enable()


def _trace_all(fn, name: str, location, grid, items, bound, chip: ChipSpec) -> TracedKernel:
    t0 = time.perf_counter()
    instances = []
    exchanges = []
    first = None
    for pid in itertools.product(*(range(n) for n in grid)):
        trace = Trace(name, chip, pid, grid)
        with tracing(trace):
            call_args, call_kwargs, arg_names = _tracer_arguments(trace, items, bound)
            ret = fn(*call_args, **call_kwargs)
        returns = _mark_outputs(trace, ret)
        for b in trace.buffers:
            if b.memory is Memory.HBM and b.kind == "input" and b.written:
                b.kind = "inout"
        exchanges.append(trace.exchanges)
        rotation = allocate(trace)
        programs = build_programs(trace, location)
        instances.append(
            Instance(
                pid,
                programs,
                [(p, b.name) for p, b in trace.prints],
                trace.matmul_flops,
                trace.transpose_flops,
                rotation,
            )
        )
        if first is None:
            first = (trace, arg_names, returns)
        elif len(programs) != len(instances[0].programs):
            raise ConstraintError(
                f"kernel {name}: SPMD instances reach different numbers of core_barrier calls",
                location=location,
            )
    _check_exchanges(name, exchanges)
    trace, arg_names, returns = first
    shared, constants, fills = {}, {}, {}
    for b in trace.buffers:
        if b.memory is not Memory.HBM:
            continue
        if b.id in trace.constants:
            constants[b.name] = trace.constants[b.id]
        elif b.kind in ("output", "inout") and b.arg_index < 0 or (b.shared and b.kind == "scratch"):
            np_dtype = np.dtype(np.float32) if DTYPES[b.dtype] == "tfloat32" else b.dtype.numpy
            shared[b.name] = (b.shape, np_dtype, b.kind)
        if b.id in trace.hbm_fill:
            fills[b.name] = trace.hbm_fill[b.id]
    n = sum(len(p.instructions) for inst in instances for p in inst.programs)
    return TracedKernel(
        name,
        chip,
        grid,
        instances,
        arg_names,
        returns,
        shared,
        constants,
        fills,
        time.perf_counter() - t0,
        n,
    )


def _check_exchanges(name: str, exchanges: list[list[tuple]]) -> None:
    """Every sendrecv receives from the rank that sends to it at the same call."""
    for k, calls in enumerate(zip(*exchanges, strict=False)):
        for me, _to, frm, location in calls:
            sent_to = calls[frm][1]
            if sent_to != me:
                raise ConstraintError(
                    f"kernel {name}: sendrecv #{k} on rank {me} receives from rank {frm}, but rank {frm} "
                    f"sends to rank {sent_to}", location=location)


def _tracer_arguments(trace: Trace, items, bound):
    arg_names: list[str | None] = []
    values = {name: _tracer(trace, name, value, arg_names) for name, value in items}
    if bound is None:  # no signature: everything positional
        return [values[n] for n, _ in items], {}, arg_names
    call = inspect.BoundArguments(bound.signature, dict(values))
    return call.args, call.kwargs, arg_names


def _tracer(trace: Trace, name: str, value, arg_names: list):
    if is_array(value):
        shape = tuple(int(s) for s in value.shape)
        buf = trace.new_buffer(name, Memory.HBM, shape, to_sim_dtype(_np_dtype(value)), None, kind="input")
        buf.arg_index = len(arg_names)
        arg_names.append(buf.name)
        return NkiTensor.whole(buf)
    if isinstance(value, (tuple, list)) and value and all(is_array(v) for v in value):
        return type(value)(_tracer(trace, f"{name}_{i}", v, arg_names) for i, v in enumerate(value))
    arg_names.append(None)
    return value


def _np_dtype(x) -> np.dtype:
    if isinstance(x, np.ndarray):
        return x.dtype
    name = str(x.dtype).replace("torch.", "")
    return to_sim_dtype(name).numpy


def _mark_outputs(trace: Trace, ret):
    """Mark the returned HBM tensors as outputs; return the structure with their names."""
    if ret is None:
        return None
    if isinstance(ret, (tuple, list)):
        return type(ret)(_mark_outputs(trace, r) for r in ret)
    if isinstance(ret, dict):
        return {k: _mark_outputs(trace, v) for k, v in ret.items()}
    if not isinstance(ret, TensorView):
        raise ConstraintError(
            f"kernel {trace.name} returned {type(ret).__name__}; kernels return HBM tensors "
            f"(nl.ndarray(..., buffer=nl.shared_hbm))"
        )
    b = ret.buf
    if b.memory is not Memory.HBM:
        raise ConstraintError(
            f"kernel {trace.name} returned {b.describe()}; kernel outputs must be HBM tensors "
            f"(nl.shared_hbm): store the tile into one and return that",
            location=b.location,
        )
    if ret.offset != 0 or ret.shape != b.shape:
        raise ConstraintError(
            f"kernel {trace.name} returned a view {ret.shape} of {b.describe()}; return the whole tensor",
            location=b.location,
        )
    if len(trace.grid) > 1 or trace.grid[0] > 1:
        if not b.shared and b.kind != "input":
            raise ConstraintError(
                f"kernel {trace.name} returned {b.describe()}, which is private to one SPMD "
                f"instance; outputs of a launch grid must be nl.shared_hbm",
                location=b.location,
            )
    if b.kind == "input":
        b.kind = "inout"
    elif b.kind == "scratch":
        b.kind = "output"
    return b.name
