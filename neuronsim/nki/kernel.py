"""``nki.jit`` kernels: a signature is traced once into Programs and cached.

A :class:`Kernel` specializes on the call's signature — array shapes and dtypes, the values of the
other arguments (trace-time constants), the launch grid and the chip. Specializing traces the
kernel once per SPMD instance (``nl.program_id`` is a constant in each), allocates each trace's
SBUF/PSUM and builds its Programs. The :class:`TracedKernel` is cached, so running the same
signature again costs no tracing (and ``sim.prepare`` caches the schedules of its Programs).
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from neuronsim.errors import ConstraintError, InputError
from neuronsim.nki.allocate import allocate
from neuronsim.nki.build import build_programs
from neuronsim.nki.tracing import NkiTensor, Trace, active_trace, tracing
from neuronsim.nki.types import DTYPES, to_sim_dtype
from neuronsim.options import current as current_options
from neuronsim.sim.chips import ChipSpec, get_chip
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


# Functions ``launch(kernel, args, kwargs)`` asked first by every call of a kernel: a layer above
# (the torch device) runs the call on its own tensors and returns the kernel's result, or returns
# NotImplemented to leave the call to ``nki.simulate``. This package imports no such layer.
_launchers: list = []


def register_launcher(launch) -> None:
    """Ask ``launch(kernel, args, kwargs)`` first at every kernel call (idempotent)."""
    if launch not in _launchers:
        _launchers.append(launch)


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or _is_torch(x)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _array_key(x):
    if isinstance(x, np.ndarray):
        return ("array", x.shape, str(x.dtype))
    return ("array", tuple(x.shape), str(x.dtype))


def _const_key(x):
    try:
        hash(x)
        return ("const", type(x).__name__, x)
    except TypeError:
        return ("const", type(x).__name__, repr(x))


def _grid(grid) -> tuple[int, ...]:
    g = tuple(int(n) for n in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if not g or any(n < 1 for n in g):
        raise ValueError(f"launch grid {grid!r} must be positive integers")
    return g


class Kernel:
    """An ``@nki.jit`` kernel. Call it with arrays to simulate it; ``kernel[2](...)`` launches LNC=2."""

    def __init__(
        self, fn, grid: tuple[int, ...] = (1,), options: dict | None = None, _cache=None, _lock=None
    ):
        self.fn = fn
        self.grid = grid
        self.options = dict(options or {})
        self._cache: dict = {} if _cache is None else _cache
        self._lock = threading.Lock() if _lock is None else _lock
        self.trace_count = 0 if _cache is None else None
        functools.update_wrapper(self, fn)
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        code = getattr(fn, "__code__", None)
        self.location = f"{code.co_filename}:{code.co_firstlineno}" if code else None
        self._parent: Kernel | None = None  # the kernel a grid view (kernel[2]) was made from

    def __getitem__(self, grid) -> Kernel:
        k = Kernel(self.fn, _grid(grid), self.options, self._cache, self._lock)
        k._parent = self._parent or self
        return k

    def __call__(self, *args, **kwargs):
        for launch in _launchers:  # device tensors: the device layer runs the kernel on them
            result = launch(self, args, kwargs)
            if result is not NotImplemented:
                return result
        if active_trace() is not None:  # a kernel called from a kernel is inlined
            return self.fn(*args, **kwargs)
        from neuronsim.nki.simulate import simulate

        return simulate(self)(*args, **kwargs)

    def __repr__(self) -> str:
        grid = "" if self.grid == (1,) else f"[{', '.join(map(str, self.grid))}]"
        return f"<nki kernel {self.__name__}{grid}>"

    @property
    def traces(self) -> int:
        """How many times this kernel (any grid) has been traced."""
        return (self._parent or self).trace_count

    def _bind(self, args, kwargs) -> inspect.BoundArguments | None:
        if self._signature is None:
            return None
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound

    def specialize(self, args, kwargs=None, chip: str | ChipSpec | None = None) -> TracedKernel:
        """The traced form of this kernel for these arguments (cached per signature)."""
        kwargs = kwargs or {}
        spec = get_chip(current_options().chip if chip is None else chip)
        bound = self._bind(args, kwargs)
        items = (
            list(bound.arguments.items())
            if bound is not None
            else [(f"arg{i}", a) for i, a in enumerate(args)]
        )
        key = (
            tuple((n, _array_key(v) if _is_array(v) else _const_key(v)) for n, v in items),
            self.grid,
            spec.name,
            id(spec),
        )
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        traced = self._trace(items, bound, spec)
        with self._lock:
            self._cache[key] = traced
            (self._parent or self).trace_count += 1
        return traced

    # ------------------------------------------------------------ tracing

    def _trace(self, items, bound, chip: ChipSpec) -> TracedKernel:
        # Tracing allocates many small objects and frees none: the cycle collector only costs time.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._trace_all(items, bound, chip)
        finally:
            if collecting:
                gc.enable()

    def _trace_all(self, items, bound, chip: ChipSpec) -> TracedKernel:
        t0 = time.perf_counter()
        instances = []
        first = None
        for pid in itertools.product(*(range(n) for n in self.grid)):
            trace = Trace(self.__name__, chip, pid, self.grid)
            with tracing(trace):
                call_args, call_kwargs, arg_names = self._tracer_arguments(trace, items, bound)
                ret = self.fn(*call_args, **call_kwargs)
            returns = _mark_outputs(trace, ret)
            for b in trace.buffers:
                if b.memory is Memory.HBM and b.kind == "input" and b.written:
                    b.kind = "inout"
            rotation = allocate(trace)
            programs = build_programs(trace, self.location)
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
                    f"kernel {self.__name__}: SPMD instances reach different numbers of core_barrier calls",
                    location=self.location,
                )
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
            self.__name__,
            chip,
            self.grid,
            instances,
            arg_names,
            returns,
            shared,
            constants,
            fills,
            time.perf_counter() - t0,
            n,
        )

    def _tracer_arguments(self, trace: Trace, items, bound):
        arg_names: list[str | None] = []
        values = {name: _tracer(trace, name, value, arg_names) for name, value in items}
        if bound is None:  # no signature: everything positional
            return [values[n] for n, _ in items], {}, arg_names
        call = inspect.BoundArguments(bound.signature, dict(values))
        return call.args, call.kwargs, arg_names


def _tracer(trace: Trace, name: str, value, arg_names: list):
    if _is_array(value):
        shape = tuple(int(s) for s in value.shape)
        buf = trace.new_buffer(name, Memory.HBM, shape, to_sim_dtype(_np_dtype(value)), None, kind="input")
        buf.arg_index = len(arg_names)
        arg_names.append(buf.name)
        return NkiTensor.whole(buf)
    if isinstance(value, (tuple, list)) and value and all(_is_array(v) for v in value):
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
    if not isinstance(ret, NkiTensor):
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


def jit(fn=None, **kwargs):
    """``@nki.jit``: make ``fn`` an NKI kernel (options such as ``mode=`` are accepted and ignored)."""
    if fn is None:
        return lambda f: Kernel(f, options=kwargs)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, options=kwargs)


def as_kernel(kernel) -> Kernel:
    if isinstance(kernel, Kernel):
        return kernel
    if callable(kernel):
        return Kernel(kernel)
    raise TypeError(f"expected an @nki.jit kernel or a function, got {type(kernel).__name__}")


def torch_module():
    return sys.modules.get("torch")


__all__ = ["Kernel", "TracedKernel", "Instance", "jit", "as_kernel", "InputError"]
