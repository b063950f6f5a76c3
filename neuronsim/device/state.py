"""Device state: which logical core is current, how many there are, init and fork.

A process simulates the logical NeuronCore it selects, as on TorchNeuron; under torchrun each rank
selects ``neuron:{local_rank}``. ``device_count()`` is the logical-core count of one instance, and
every index below it is a device of its own (its own clock, HBM ledger and generator). The current
device is per thread, as on CUDA: it lives in the C++ device guard (``cpp/``), which torch's
own code (autograd's device threads, ``torch.accelerator``) sets and reads too.
"""

from __future__ import annotations

import os
import threading

import torch

from neuronsim.device import settings

DEVICE_TYPE = "neuron"

_initialized = False
_in_bad_fork = False


_guard_count: list = [None, None]  # [the count the C++ guard was last told, its setter]


def device_count() -> int:
    count = settings.logical_cores_per_instance()
    if count != _guard_count[0] and _guard_count[1] is not None:
        _guard_count[1](count)  # a chip option with another core count: tell the guard
        _guard_count[0] = count
    return count


_thread_device = threading.local()  # until the C++ guard is installed (tests of this module alone)


def _python_current() -> int:
    return getattr(_thread_device, "index", 0)


def _python_set(index: int) -> None:
    _thread_device.index = index


_get_current = _python_current
_set_current = _python_set


def use_native_guard(library, count: int) -> None:
    """Keep the current device in the C++ guard, where torch reads and sets it too (the guard was
    installed knowing ``count`` devices)."""
    global _get_current, _set_current
    _get_current = library.neuronsim_current_device
    _set_current = library.neuronsim_set_device
    _guard_count[:] = [count, library.neuronsim_set_device_count]


def current_device() -> int:
    return _get_current()


def device_index(device, optional: bool = True) -> int:
    """The index named by ``device`` (int, "neuron:N", torch.device, None = current), validated."""
    if device is None:
        return _get_current()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type not in (DEVICE_TYPE, "privateuseone"):
            raise ValueError(f"Expected a neuron device, but got: {device}")
        index = _get_current() if device.index is None else device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise ValueError(f"Invalid device id: {device!r}")
    if not 0 <= index < device_count():
        raise ValueError(
            f"Invalid device id: {index} "
            f"(a {settings.chip().name} instance has {device_count()} logical NeuronCores)"
        )
    return index


def set_device(device) -> None:
    _set_current(device_index(device))


def is_initialized() -> bool:
    return _initialized


def lazy_init() -> None:
    global _initialized
    if _initialized:
        return
    if _in_bad_fork:
        raise RuntimeError(
            "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with "
            "multiprocessing, use the 'spawn' start method"
        )
    _initialized = True


def is_in_bad_fork() -> bool:
    return _in_bad_fork


def _after_fork_in_child() -> None:
    global _initialized, _in_bad_fork
    if _initialized:
        _initialized, _in_bad_fork = False, True


os.register_at_fork(after_in_child=_after_fork_in_child)
