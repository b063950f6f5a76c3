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
    _bound_the_default_timeout(dist.distributed_c10d)


def _bound_the_default_timeout(c10d) -> None:
    """``init_process_group("neuron")`` without a timeout waits for peers (the rendezvous store, the
    group) for the neuron timeout (60 s), not torch's 30 minutes: a rank that never comes is an error
    soon. torch has no hook for this; its private ``_get_default_timeout`` is wrapped."""
    original = c10d._get_default_timeout

    def _get_default_timeout(backend):
        if str(backend).lower() == BACKEND_NAME:
            from neuronsim.device.distributed.backend import collective_timeout

            return collective_timeout(None)
        return original(backend)

    c10d._get_default_timeout = _get_default_timeout


def _create(dist_backend_opts, backend_options):
    from neuronsim.device.distributed.backend import create  # only processes that join a group pay

    return create(dist_backend_opts, backend_options)
