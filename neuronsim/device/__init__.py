"""The emulated ``neuron`` PyTorch device (PrivateUse1), registered by :func:`enable`.

``import torch`` calls :func:`_autoload` through the ``torch.backends`` entry point; it registers
the device only when ``NEURON_SIM=1``, so a real TorchNeuron install is never shadowed. Importing
this package does not import torch.
"""

from __future__ import annotations

import os
import warnings

from neuronsim import env


def enable() -> None:
    """Register the ``neuron`` device in this process (idempotent)."""
    # torch first: with NEURON_SIM=1 its import runs _autoload, which imports registration itself
    # (importing registration first would re-enter it half-initialized from torch's import)
    import torch  # noqa: F401

    from neuronsim.device import registration

    registration.register()


def _autoload() -> None:
    """``torch.backends`` entry point: register when ``NEURON_SIM=1``, else stay out of the way."""
    if os.environ.get(env.NEURON_SIM, "").strip() != "1":
        return
    from neuronsim.device import registration

    owner = registration.owner_of_privateuse1()
    if owner not in (None, "neuronsim"):
        warnings.warn(
            f"{env.NEURON_SIM}=1 but the PrivateUse1 device is already registered as {owner!r}; "
            "neuronsim's emulated device is not enabled",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    registration.register()
    from neuronsim.nki_alias import install_alias, install_torch_neuronx_alias

    install_alias()  # kernel files' `import nki` (lazy: costs nothing until it runs)
    install_torch_neuronx_alias()  # TorchNeuron scripts' and the ecosystem's `import torch_neuronx`
