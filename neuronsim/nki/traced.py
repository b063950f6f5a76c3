"""Tracing a kernel for one signature: a :class:`TracedKernel`, its Programs per SPMD instance.

The kernel body runs once per instance of the launch grid (``nl.program_id`` is a constant in
each) with tracer tensors for its array arguments; each trace is allocated (``allocate.py``) and
built into Programs, one per ``core_barrier`` phase (``build.py``). ``kernel.py`` caches the result
per signature; ``launch.py`` runs it.
"""

from __future__ import annotations

import ast
import gc
import inspect
import itertools
import os
import textwrap
import time
from dataclasses import dataclass, field

import numpy as np

from neuronsim.errors import ConstraintError, DtypeError, InputError, UnsupportedError
from neuronsim.nki import hbm
from neuronsim.nki.allocate import allocate
from neuronsim.nki.build import build_programs
from neuronsim.nki.control_flow import extend_liveness
from neuronsim.nki.language import NkiTensor
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import Trace, code_location, tracing
from neuronsim.nki.types import DTYPES, host_mx_dtype, host_mx_name, host_words, to_sim_dtype
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.ir import Memory, Program


class ReturnedView(str):
    """A returned view of an HBM tensor (``return out.reshape(...)``): the tensor's name, plus the
    view's element offset and ``(step, num)`` dims, which the launch applies to the array."""

    offset: int
    dims: tuple[tuple[int, int], ...]

    def __new__(cls, name: str, offset: int, dims):
        self = super().__new__(cls, name)
        self.offset, self.dims = int(offset), tuple(dims)
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.dims)


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
    privates = []
    first = None
    for pid in itertools.product(*(range(n) for n in grid)):
        trace = Trace(name, chip, pid, grid)
        with tracing(trace):
            call_args, call_kwargs, arg_names = _tracer_arguments(trace, items, bound, location)
            try:
                ret = fn(*call_args, **call_kwargs)
            except AttributeError as exc:
                misuse = _misused_argument(exc, items)
                if misuse is None:
                    raise
                raise misuse from None
        returns = _mark_outputs(trace, ret, lambda: _return_location(fn) or location)
        for b in trace.hbm_buffers:
            if b.kind == "input" and b.written:
                b.kind = "inout"
        exchanges.append(trace.exchanges)
        privates.append(hbm.private(trace))
        extend_liveness(trace)
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
    hbm_bytes = hbm.check_chip(name, trace, privates, chip)
    shared, constants, fills = {}, {}, {}
    for b in trace.hbm_buffers:
        if b.alias_of is not None:  # an alias is its tensor's bytes
            continue
        if b.id in trace.constants:
            constants[b.name] = trace.constants[b.id]
        elif b.kind in ("output", "inout") and b.arg_index < 0 or (b.shared and b.kind == "scratch"):
            np_dtype = np.dtype(np.float32) if DTYPES[b.dtype] == "tfloat32" else b.dtype.numpy
            if b.mx is not None:
                np_dtype = host_mx_dtype(b.mx)
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
        info={"hbm_bytes": hbm_bytes, "loop_barriers": trace.loop_barriers,
              # the staging tensors of nki.collectives calls: one array seen by every rank (ranks.py)
              "world": {c[2] for c in trace.collectives},
              "collectives": [(c[0], c[1], c[4], c[5]) for c in trace.collectives],
              "private_hbm_bytes": max(sum(hbm.nbytes(b) for b in p) for p in privates)},
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


def _tracer_arguments(trace: Trace, items, bound, location):
    arg_names: list[str | None] = []
    values = {name: _tracer(trace, name, value, arg_names, location) for name, value in items}
    if bound is None:  # no signature: everything positional
        return [values[n] for n, _ in items], {}, arg_names
    call = inspect.BoundArguments(bound.signature, dict(values))
    return call.args, call.kwargs, arg_names


def _tracer(trace: Trace, name: str, value, arg_names: list, location=None):
    if is_array(value):
        shape = tuple(int(s) for s in value.shape)
        if 0 in shape:
            raise InputError(f"kernel {trace.name}: argument '{name}' has shape {shape}, with no elements; "
                             f"kernel tensors are not empty", location=location)
        try:
            dtype = to_sim_dtype(_np_dtype(value))
        except DtypeError as exc:
            raise DtypeError(f"kernel {trace.name}: argument '{name}' is {value.dtype}; NKI kernels take "
                             f"32-bit and narrower dtypes (cast it first) ({exc.what})",
                             location=location) from None
        buf = trace.new_buffer(name, Memory.HBM, shape, dtype, None, kind="input")
        buf.mx = host_mx_name(getattr(value, "dtype", None))  # MX words keep their format
        buf.arg_index = len(arg_names)
        arg_names.append(buf.name)
        return NkiTensor.whole(buf)
    if isinstance(value, (tuple, list)) and value and all(is_array(v) for v in value):
        return type(value)(_tracer(trace, f"{name}_{i}", v, arg_names, location) for i, v in enumerate(value))
    arg_names.append(None)
    return value


def _misused_argument(exc: AttributeError, items) -> InputError | None:
    """An attribute a kernel looked up on a non-array argument (``a.shape`` of a list or str): the
    call passed the wrong thing. None when the object is not one of the call's arguments."""
    obj = getattr(exc, "obj", None)
    if obj is None or is_array(obj):
        return None
    for name, value in items:
        if value is obj and isinstance(value, (list, tuple, str, bytes, int, float)):
            return InputError(
                f"argument '{name}' is a {type(value).__name__}, but the kernel uses it as a tensor "
                f"(.{exc.name}); pass a numpy array", location=_kernel_frame(exc))
    return None


def _kernel_frame(exc: BaseException) -> str | None:
    """``file:line`` of the innermost traceback frame in kernel code (outside neuronsim/nki)."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_NKI_DIR):
            found = code_location(tb.tb_frame.f_code, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _return_location(fn) -> str | None:
    """``file:line`` of the kernel's ``return`` statement when it has exactly one."""
    code = getattr(fn, "__code__", None)
    hit = _RETURNS.get(code, _RETURNS)
    if hit is not _RETURNS:
        return hit
    hit = None
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        returns = []
        stack = list(ast.iter_child_nodes(tree.body[0]))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Return):
                returns.append(node)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(node))
        if len(returns) == 1:
            hit = code_location(code, start + returns[0].lineno - 1)
    except (OSError, TypeError, SyntaxError, IndexError):
        pass
    if code is not None:
        _RETURNS[code] = hit
    return hit


_RETURNS: dict = {}
_NKI_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _np_dtype(x) -> np.dtype:
    if isinstance(x, np.ndarray):
        return host_words(x).dtype
    name = str(x.dtype).replace("torch.", "")
    return to_sim_dtype(name).numpy


def _mark_outputs(trace: Trace, ret, where):
    """Mark the returned HBM tensors as outputs; return the structure with their names. ``where()``
    is the ``file:line`` its errors name (asked for only then: it reads the kernel's source)."""
    if ret is None:
        if not any(b.kind == "input" and b.written for b in trace.hbm_buffers):
            raise ConstraintError(
                f"kernel {trace.name} returned None and writes none of its arguments, so nothing it "
                f"computes reaches the caller; return its output tensor(s)", location=where())
        return None
    if isinstance(ret, (tuple, list)):
        return type(ret)(_mark_outputs(trace, r, where) for r in ret)
    if isinstance(ret, dict):
        return {k: _mark_outputs(trace, v, where) for k, v in ret.items()}
    if not isinstance(ret, TensorView):
        raise ConstraintError(
            f"kernel {trace.name} returned {type(ret).__name__}; kernels return HBM tensors "
            f"(nl.ndarray(..., buffer=nl.shared_hbm))", location=where(),
        )
    b = ret.buf
    if b.memory is Memory.HBM and b.alias_of is not None:
        raise UnsupportedError(
            f"kernel {trace.name} returned {b.describe()}, a dtype view of HBM tensor "
            f"'{b.alias_of.name}'; return the tensor itself", location=where())
    if b.memory is not Memory.HBM:
        raise ConstraintError(
            f"kernel {trace.name} returned {b.describe()} (allocated at {b.location}); kernel outputs "
            f"must be HBM tensors (nl.shared_hbm): store the tile into one and return that",
            location=where(),
        )
    view = ret.offset != 0 or ret.shape != b.shape
    if len(trace.grid) > 1 or trace.grid[0] > 1:
        if not b.shared and b.kind != "input":
            raise ConstraintError(
                f"kernel {trace.name} returned {b.describe()}, which is private to one SPMD "
                f"instance; outputs of a launch grid must be nl.shared_hbm",
                location=where(),
            )
    if b.kind == "input":
        b.kind = "inout"
    elif b.kind == "scratch":
        b.kind = "output"
    return ReturnedView(b.name, ret.offset, ret.dims) if view else b.name
