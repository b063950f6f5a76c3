"""Storage constructors that would reach the (absent) PrivateUse1 allocator.

``torch.UntypedStorage(n, device="neuron")`` and ``storage.to("neuron")`` (which
``torch.load(map_location="neuron")`` uses) allocate through ``c10::GetAllocator(PrivateUse1)``;
a Python backend cannot register one and the process would crash. Route them through
``torch.empty``, which reaches the device's allocation kernel.
"""

from __future__ import annotations

import torch
import torch.storage

from neuronsim.device import state

_installed = False


def _is_neuron(device) -> bool:
    return device is not None and torch.device(device).type == state.DEVICE_TYPE


def _empty_storage(nbytes: int, device) -> torch.UntypedStorage:
    return torch.empty(nbytes, dtype=torch.uint8, device=device).untyped_storage()


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    original_to = torch.storage._to
    original_new = torch.UntypedStorage.__new__

    def storage_to(self, device, non_blocking=False):
        if _is_neuron(device) and self.device != torch.device(device):
            copied = _empty_storage(self.nbytes(), device)
            copied.copy_(self, non_blocking)
            return copied
        return original_to(self, device, non_blocking)

    def untyped_new(cls, *args, device=None, **kwargs):
        if _is_neuron(device):
            if not args:
                return _empty_storage(0, device)
            if len(args) == 1 and isinstance(args[0], int):
                return _empty_storage(args[0], device)
            data = original_new(cls, *args, **kwargs)
            copied = _empty_storage(data.nbytes(), device)
            copied.copy_(data)
            return copied
        if device is None:
            return original_new(cls, *args, **kwargs)
        return original_new(cls, *args, device=device, **kwargs)

    torch.storage._to = storage_to
    torch.UntypedStorage.__new__ = untyped_new
