"""torch.distributed on emulated NeuronCores: the ``neuron`` c10d backend and its cost model.

One process per logical NeuronCore, as on TorchNeuron: ``torchrun`` (or ``neuronsim run --nproc N``)
starts the ranks, ``dist.init_process_group("neuron")`` (or ``init_device_mesh("neuron", ...)``)
joins them. :mod:`.backend` moves the bytes over gloo and charges each rank's device clock;
:mod:`.topology` says where ranks sit and what a collective costs. The device registers the backend
(:func:`register`) when it registers itself.
"""

from __future__ import annotations

BACKEND_NAME = "neuron"


def register() -> None:
    """Register the ``neuron`` c10d backend for the ``neuron`` device (idempotent)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=[BACKEND_NAME])


def _create(dist_backend_opts, backend_options):
    from neuronsim.device.distributed.backend import create  # only processes that join a group pay

    return create(dist_backend_opts, backend_options)
