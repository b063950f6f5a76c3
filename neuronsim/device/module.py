"""``torch.neuron``: the device module registered for the renamed PrivateUse1 backend.

This module object itself becomes ``torch.neuron``; its functions follow TorchNeuron's
``torch.neuron`` (device, RNG, streams/events, memory, op tracking).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from neuronsim.device import memory_api as memory  # noqa: F401  (torch.neuron.memory)
from neuronsim.device import settings, state
from neuronsim.device.memory_api import (  # noqa: F401
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from neuronsim.device.random import (  # noqa: F401
    generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from neuronsim.device.streams import (  # noqa: F401
    Event,
    Stream,
    current_stream,
    default_stream,
    record_event,
    set_stream,
    stream,
    synchronize,
    wait_event,
    wait_stream,
)
from neuronsim.device.tracking import clear_op_tracking, get_executed_ops, get_fallback_ops, get_op_counts  # noqa: F401

__neuronsim__ = True  # marks this device module as neuronsim's (vs. a real TorchNeuron)

device_count = state.device_count
current_device = state.current_device
set_device = state.set_device
is_initialized = state.is_initialized
_lazy_init = state.lazy_init
init = state.lazy_init
_is_in_bad_fork = state.is_in_bad_fork


def is_available() -> bool:
    return True


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int  # simulated HBM bytes of this logical NeuronCore
    chip: str
    index: int
    neuron_core_version: str
    physical_cores: int  # physical NeuronCores in this logical core (LNC)


def get_device_properties(device=None) -> DeviceProperties:
    index = state.device_index(device)
    chip = settings.chip()
    return DeviceProperties(
        name=f"{chip.name} logical NeuronCore (neuronsim)",
        total_memory=settings.hbm_capacity_bytes(),
        chip=chip.name,
        index=index,
        neuron_core_version=chip.neuron_core_version,
        physical_cores=chip.default_lnc,
    )


def get_device_name(device=None) -> str:
    return f"{state.DEVICE_TYPE}:{state.device_index(device)}"


class device:
    """Context manager that makes ``device`` current (``ValueError`` for an invalid index)."""

    def __init__(self, device):
        self.index = None if device is None else state.device_index(device)
        self.previous = None

    def __enter__(self):
        self.previous = state.current_device()
        if self.index is not None:
            state.set_device(self.index)
        return self

    def __exit__(self, *exc):
        state.set_device(self.previous)
        return False


def device_of(obj) -> contextlib.AbstractContextManager:
    if isinstance(obj, torch.Tensor) and obj.device.type == state.DEVICE_TYPE:
        return device(obj.get_device())
    return contextlib.nullcontext()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float32, torch.float16, torch.bfloat16]


def get_dynamo_metrics() -> list[dict]:
    """One record per graph compiled by ``torch.compile(backend="neuron")``."""
    from neuronsim.device import compile

    return compile.get_dynamo_metrics()


def reset_dynamo_metrics() -> None:
    from neuronsim.device import compile

    compile.reset_dynamo_metrics()


def _sleep(cycles: int) -> None:
    """A no-op, as on TorchNeuron."""


def __getattr__(name: str):
    # torch.utils.checkpoint reads `device_module._initialized` (CUDA's flag) before stashing
    # device RNG states; it must follow the device's lazy init.
    if name == "_initialized":
        return state.is_initialized()
    raise AttributeError(f"module 'torch.neuron' has no attribute {name!r}")
