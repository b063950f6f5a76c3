"""The chokepoint: every op on neuron tensors runs through :func:`execute`.

``execute`` looks the op up in :data:`NATIVE_KERNELS` first. A native kernel (registered by the
kernels layer: an NKI kernel run by the simulator) computes the op on the device tensors, charges
the device clock with its own simulated schedule and returns the result, or returns
``NotImplemented`` to decline a signature it does not cover. Everything else is a host fallback:
computed by ATen-CPU on zero-copy host aliases, charged a host round trip and counted by
``torch.neuron.get_fallback_ops()``. Native runs are counted by ``get_executed_ops()``.

neuronsim errors become torch's own exception types here, with the same message.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch

from neuronsim.device import tracking
from neuronsim.device.host import run_on_host
from neuronsim.device.schema import plan_for
from neuronsim.errors import HbmCapacityError, NeuronSimError, UnsupportedError


class NativeKernel(Protocol):
    def __call__(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        """Compute ``op`` on device tensors and charge ``neuronsim.device.clock.clock(index)``;
        return ``NotImplemented`` to let the op fall back to the host."""


NATIVE_KERNELS: dict[torch._ops.OpOverload, NativeKernel] = {}


def register_native_kernel(op: torch._ops.OpOverload, kernel: NativeKernel) -> None:
    NATIVE_KERNELS[op] = kernel


def unregister_native_kernel(op: torch._ops.OpOverload) -> None:
    NATIVE_KERNELS.pop(op, None)


def execute(op: torch._ops.OpOverload, *args, **kwargs):
    try:
        native = NATIVE_KERNELS.get(op)
        if native is not None:
            result = native(op, args, kwargs)
            if result is not NotImplemented:
                tracking.record_native(op.name())
                return result
        return run_on_host(plan_for(op), args, kwargs)
    except NeuronSimError as exc:
        raise as_torch_error(exc) from exc


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
