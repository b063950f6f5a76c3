"""Process-wide device state: which logical core is current, how many there are, init and fork.

One process drives one logical NeuronCore, as on TorchNeuron; under torchrun each rank selects
``neuron:{local_rank}``. ``device_count()`` is the chip's logical-core count.
"""

from __future__ import annotations

import os

import torch

from neuronsim.device import settings

DEVICE_TYPE = "neuron"

_current = 0
_initialized = False
_in_bad_fork = False


def device_count() -> int:
    return settings.chip().logical_cores_per_chip


def current_device() -> int:
    return _current


def device_index(device, optional: bool = True) -> int:
    """The index named by ``device`` (int, "neuron:N", torch.device, None = current), validated."""
    if device is None:
        return _current
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type not in (DEVICE_TYPE, "privateuseone"):
            raise ValueError(f"Expected a neuron device, but got: {device}")
        index = _current if device.index is None else device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise ValueError(f"Invalid device id: {device!r}")
    if not 0 <= index < device_count():
        raise ValueError(
            f"Invalid device id: {index} "
            f"(this {settings.chip().name} has {device_count()} logical NeuronCores)"
        )
    return index


def set_device(device) -> None:
    global _current
    _current = device_index(device)


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
