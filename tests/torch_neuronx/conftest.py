"""The torch_neuronx tests run in one process with the device enabled and ``torch_neuronx`` aliased."""

from __future__ import annotations

import neuronsim
from neuronsim.nki_alias import install_alias, install_torch_neuronx_alias

neuronsim.enable()
install_alias(force=True)
install_torch_neuronx_alias(force=True)
