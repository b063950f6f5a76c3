"""``nki.jit`` kernels: a signature is traced once into Programs and cached.

A :class:`Kernel` specializes on the call's signature — array shapes and dtypes, the values of the
other arguments (trace-time constants), the launch grid and the chip — into a
:class:`~neuronsim.nki.traced.TracedKernel` (``traced.py``: one trace per SPMD instance, allocated
and built into Programs). It is cached, so running the same signature again costs no tracing (and
``sim.prepare`` caches the schedules of its Programs). Calling a kernel with arrays launches it
(``launch.py``); called from a kernel being traced, it is inlined. A layer above (the torch device)
can take calls on its own tensors (:func:`register_launcher`).
"""

from __future__ import annotations

import functools
import inspect
import threading

import numpy as np

from neuronsim.errors import InputError
from neuronsim.nki import launch
from neuronsim.nki.trace import active_trace, code_location, launch_rank
from neuronsim.nki.traced import TracedKernel, is_array, trace_kernel
from neuronsim.nki.types import host_mx_name
from neuronsim.options import current as current_options
from neuronsim.sim.chips import ChipSpec, get_chip

# Functions ``launch(kernel, args, kwargs)`` asked first by every call of a kernel: a layer above
# (the torch device) runs the call on its own tensors and returns the kernel's result, or returns
# NotImplemented to leave the call to the simulator. This package imports no such layer.
_launchers: list = []


def register_launcher(launch) -> None:
    """Ask ``launch(kernel, args, kwargs)`` first at every kernel call (idempotent)."""
    if launch not in _launchers:
        _launchers.append(launch)


def _array_key(x):
    if isinstance(x, np.ndarray):  # an MX format in the dtype's metadata is part of the signature
        return ("array", x.shape, str(x.dtype), host_mx_name(x.dtype))
    return ("array", tuple(x.shape), str(x.dtype))


def _arg_key(x):
    """An argument's part of the signature: an array's shape and dtype, for a list or tuple of arrays
    each one's (the tracer takes them as arrays too, never their values), else the constant itself."""
    if is_array(x):
        return _array_key(x)
    if isinstance(x, (tuple, list)) and x and all(is_array(e) for e in x):
        return ("arrays", type(x).__name__, tuple(_array_key(e) for e in x))
    return _const_key(x)


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


_UNSET = object()


class Kernel:
    """An ``@nki.jit`` kernel. Call it with arrays to simulate it; ``kernel[2](...)`` launches LNC=2."""

    def __init__(
        self, fn, grid: tuple[int, ...] = (1,), options: dict | None = None, _cache=None, _lock=None
    ):
        functools.update_wrapper(self, fn)  # first: it copies fn.__dict__, which may hold an 'fn'
        self.fn = fn
        self.grid = grid
        self.options = dict(options or {})
        self._cache: dict = {} if _cache is None else _cache
        self._lock = threading.Lock() if _lock is None else _lock
        self.trace_count = 0 if _cache is None else None
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        self._location = _UNSET
        self._parent: Kernel | None = None  # the kernel a grid view (kernel[2]) was made from

    @property
    def location(self) -> str | None:
        """``file:line`` of the kernel's definition (worked out on first use: a kernel made where
        torch.compile traces must not look at the file system)."""
        if self._location is _UNSET:
            code = getattr(self.fn, "__code__", None)
            self._location = code_location(code) if code else None
        return self._location

    def __getitem__(self, grid) -> Kernel:
        legacy_grid = getattr(self.fn, "nki_launch_grid", None)  # the legacy API's launch rules
        k = Kernel(self.fn, _grid(legacy_grid(grid) if legacy_grid else grid), self.options, self._cache,
                   self._lock)
        k._parent = self._parent or self
        return k

    def __call__(self, *args, **kwargs):
        for device_launch in _launchers:  # device tensors: the device layer runs the kernel on them
            result = device_launch(self, args, kwargs)
            if result is not NotImplemented:
                return result
        if active_trace() is not None:  # a kernel called from a kernel is inlined
            return self.fn(*args, **kwargs)
        outputs, _runs = launch.run(self.specialize(args, kwargs), self.arrays(args, kwargs))
        return outputs

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
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:  # a wrong number or name of arguments: the call, not the kernel
            raise InputError(f"kernel {self.__name__}{self._signature}: {exc}",
                             location=self.location) from None
        bound.apply_defaults()
        return bound

    def arrays(self, args, kwargs) -> list:
        """The array arguments of a call, in order (the arrays of a list or tuple argument in turn)."""
        bound = self._bind(args, kwargs)
        values = list(bound.arguments.values()) if bound is not None else list(args)
        out = []
        for v in values:
            if is_array(v):
                out.append(v)
            elif isinstance(v, (tuple, list)) and v and all(is_array(e) for e in v):
                out.extend(v)
        return out

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
            tuple((n, _arg_key(v)) for n, v in items),
            self.grid,
            spec.name,
            id(spec),
            launch_rank.value,
            current_options().nki_version,  # the release's semantics are traced in (nki_releases)
        )
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        traced = trace_kernel(self.fn, self.__name__, self.location, self.grid, items, bound, spec)
        with self._lock:
            self._cache[key] = traced
            (self._parent or self).trace_count += 1
        return traced


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
