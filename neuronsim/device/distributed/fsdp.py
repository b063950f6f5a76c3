"""FSDP2 on the emulated device: unsharded parameters are not freed between uses.

FSDP2 frees an unsharded parameter by resizing its storage to 0 bytes and re-grows it before the
next all-gather. Resizing a PrivateUse1 storage needs ``resizePrivateUse1Bytes`` in the device's C++
hooks, which a Python backend cannot provide; so for neuron tensors the free is skipped (the
all-gather writes the same bytes again). Values are unaffected; the simulated HBM keeps the
unsharded parameters charged, so FSDP's memory saving on them is not modelled.
"""

from __future__ import annotations

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    original = _fsdp_param.free_storage

    def free_storage(tensor) -> None:
        if tensor.device.type != "neuron":
            original(tensor)

    _fsdp_param.free_storage = free_storage
    _installed = True
