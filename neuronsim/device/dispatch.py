"""The chokepoint: every op on neuron tensors runs through :func:`execute`.

``execute`` looks the op up in :data:`NATIVE_KERNELS` first. A native kernel (registered by the
kernels layer: an NKI kernel run by the simulator) computes the op on the device tensors, charges
the device clock with its own simulated schedule and returns the result, or returns
``NotImplemented`` to decline a signature it does not cover. Everything else is a host fallback:
computed by ATen-CPU on zero-copy host aliases, charged a host round trip and counted by
``torch.neuron.get_fallback_ops()``. Native runs are counted by ``get_executed_ops()``. An op
ATen-CPU has no kernel for (CUDA-only ops PyTorch routes to any non-CPU device, such as the fused
RNN cells) is decomposed into ops the device runs (``decompositions.py``), never sent to the host.

neuronsim errors become torch's own exception types here, with the same message.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch

from neuronsim.device import decompositions, hbm, tracking
from neuronsim.device.host import run_on_host
from neuronsim.device.schema import plan_for
from neuronsim.errors import HbmCapacityError, NeuronSimError, UnsupportedError


class NativeKernel(Protocol):
    def __call__(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        """Compute ``op`` on device tensors and charge ``neuronsim.device.clock.clock(index)``;
        return ``NotImplemented`` to let the op fall back to the host."""


# Called after the native kernels change (native/fast.py: the C++ cached op forgets its records).
on_change = None


def _changed() -> None:
    if on_change is not None:
        on_change()


class _Registry(dict):
    """op -> native kernel, with a copy keyed by the op's name: ``OpOverload.__hash__`` is Python
    code, and the chokepoint looks a kernel up on every call (the name, a str, hashes in C)."""

    def __init__(self):
        super().__init__()
        self.by_name: dict[str, NativeKernel] = {}

    def __setitem__(self, op, kernel):
        super().__setitem__(op, kernel)
        self.by_name[op._name] = kernel
        _changed()

    def __delitem__(self, op):
        super().__delitem__(op)
        del self.by_name[op._name]
        _changed()

    def pop(self, op, *default):
        self.by_name.pop(op._name, None)
        try:
            return super().pop(op, *default)
        finally:
            _changed()

    def clear(self):
        super().clear()
        self.by_name.clear()
        _changed()

    def update(self, other=(), **more):
        for op, kernel in dict(other, **more).items():
            self[op] = kernel


NATIVE_KERNELS: dict[torch._ops.OpOverload, NativeKernel] = _Registry()
_BY_NAME = NATIVE_KERNELS.by_name


def register_native_kernel(op: torch._ops.OpOverload, kernel: NativeKernel) -> None:
    NATIVE_KERNELS[op] = kernel


def unregister_native_kernel(op: torch._ops.OpOverload) -> None:
    NATIVE_KERNELS.pop(op, None)


def execute(op: torch._ops.OpOverload, *args, **kwargs):
    try:
        if hbm.several_devices and not on_one_device(op, args, kwargs):
            # (Only one device in use, the common case: nothing to compare.)
            return _foreach_per_device(op, args, kwargs)
        name = op._name
        native = _BY_NAME.get(name)
        if native is not None:
            result = native(op, args, kwargs)
            if result is not NotImplemented:
                tracking.record_native(name)
                return result
        plan = plan_for(op)
        if not plan.host_kernel:
            return _decomposed(op)(*args, **kwargs)
        return run_on_host(plan, args, kwargs)
    except NeuronSimError as exc:
        raise as_torch_error(exc) from exc


def run_native(op: torch._ops.OpOverload, *args, **kwargs):
    """The op computed by its native kernel, or ``NotImplemented`` if none takes the call (no host
    fallback: for decompositions whose host path differs from the op's, as ``histc``'s)."""
    native = NATIVE_KERNELS.get(op)
    if native is None:
        return NotImplemented
    try:
        result = native(op, args, kwargs)
    except NeuronSimError as exc:
        raise as_torch_error(exc) from exc
    if result is not NotImplemented:
        tracking.record_native(op.name())
    return result


def on_one_device(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether the op's device tensors share one device index. Two indices in one op are an error,
    as on CUDA (the host would compute it and charge one core), except in ``_foreach_`` ops, whose
    lists ATen takes across devices: those answer False."""
    first = None
    for a in (*args, *kwargs.values()):
        for t in a if isinstance(a, list | tuple) else (a,):
            if isinstance(t, torch.Tensor) and not t.is_cpu and not t.is_meta:
                index = t.get_device()
                if first is None:
                    first = index
                elif index != first:
                    if op.name().startswith("aten::_foreach_"):
                        return False
                    raise RuntimeError(
                        "Expected all tensors to be on the same device, but found at least two "
                        f"devices, neuron:{first} and neuron:{index}! (when checking arguments for "
                        f"{op.name()})")
    return True


def _foreach_per_device(op: torch._ops.OpOverload, args: tuple, kwargs: dict):
    """A ``_foreach_`` op over tensors of several devices: one call per device, on the positions of
    the first list's tensors on that device (every per-tensor list, and a ``scalars`` tensor,
    sliced alike); results are put back in order."""
    names = [a.name for a in op._schema.arguments]
    lists = next(a for a in args if isinstance(a, list | tuple))
    n = len(lists)
    groups: dict[int, list[int]] = {}
    for position, t in enumerate(lists):
        groups.setdefault(t.get_device(), []).append(position)

    def sliced(name, value, positions):
        if isinstance(value, list | tuple) and len(value) == n:
            return [value[p] for p in positions]
        if name == "scalars" and isinstance(value, torch.Tensor):
            return value[torch.tensor(positions)]
        return value

    results: list = [None] * n
    returned = False
    for positions in groups.values():
        out = op(*[sliced(names[i], a, positions) for i, a in enumerate(args)],
                 **{k: sliced(k, v, positions) for k, v in kwargs.items()})
        if out is not None:
            returned = True
            for p, r in zip(positions, out, strict=True):
                results[p] = r
    return results if returned else None


def _decomposed(op: torch._ops.OpOverload):
    found = decompositions.decomposition(op)
    if found is None:
        raise UnsupportedError(
            f"{op.name()} has no kernel on the neuron device, no CPU kernel to fall back to and no "
            "decomposition (neither torch._decomp nor neuronsim/device/decompositions.py has one)"
        )
    return found


def as_torch_error(exc: NeuronSimError) -> BaseException:
    """The torch exception type a neuronsim error becomes at the torch boundary."""
    message = str(exc)
    if isinstance(exc, HbmCapacityError):
        return torch.OutOfMemoryError(message)
    if isinstance(exc, UnsupportedError):
        return NotImplementedError(message)
    if isinstance(exc, ValueError):
        return ValueError(message)
    return RuntimeError(message)


def at_torch_boundary(kernel):
    """Decorate a kernel so neuronsim errors leave it as torch's exception types."""

    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        try:
            return kernel(*args, **kwargs)
        except NeuronSimError as exc:
            raise as_torch_error(exc) from exc

    return wrapper
