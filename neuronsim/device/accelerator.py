"""``torch.accelerator`` for neuron. Its Python functions call ``torch._C._accelerator_*``; those
that reach the device guard (device index, synchronisation) are answered by the C++ guard
(``cpp/``). Those that reach the device allocator, which a Python backend cannot register,
are wrapped: when the current accelerator is neuron they answer from the HBM ledgers, otherwise
they call torch's original.
"""

from __future__ import annotations

import torch

from neuronsim.device import memory_api, state

_originals: dict[str, object] = {}


def _is_neuron() -> bool:
    return torch._C._get_privateuse1_backend_name() == state.DEVICE_TYPE and (
        (acc := torch._C._accelerator_getAccelerator()) is not None and acc.type == state.DEVICE_TYPE
    )


def _nested_stats(index: int) -> dict:
    # torch.accelerator.memory_stats flattens a nested dict; rebuild the nesting from the flat keys.
    nested: dict = {}
    for key, value in memory_api.memory_stats(index).items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


_REPLACEMENTS = {
    "_accelerator_isAllocatorInitialized": lambda: True,
    "_accelerator_getDeviceStats": _nested_stats,
    "_accelerator_resetPeakStats": memory_api.reset_peak_memory_stats,
    "_accelerator_resetAccumulatedStats": memory_api.reset_accumulated_memory_stats,
    "_accelerator_emptyCache": memory_api.empty_cache,
    "_accelerator_getMemoryInfo": memory_api.mem_get_info,
}


def _wrap(name: str, replacement):
    original = getattr(torch._C, name)

    def entry(*args, **kwargs):
        if _is_neuron():
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    entry.__name__ = name
    entry.__wrapped__ = original
    return entry


def install() -> None:
    for name, replacement in _REPLACEMENTS.items():
        if name in _originals or not hasattr(torch._C, name):
            continue
        _originals[name] = getattr(torch._C, name)
        setattr(torch._C, name, _wrap(name, replacement))
