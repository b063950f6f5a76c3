"""What the device layer reads from the simulation options: the chip, the HBM budget, the 64-bit policy.

Read at use (not cached at import) so ``neuronsim.options(...)`` scopes apply to the device too.
Scopes are context variables: they cover ops issued by the scoping thread, not the backward ops
torch runs on its autograd device thread, which see the process defaults (the environment).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from neuronsim.options import current

if TYPE_CHECKING:
    from neuronsim.sim.chips import ChipSpec


@functools.cache
def _chip_named(name: str) -> ChipSpec:
    # Imported at first use: importing neuronsim.sim loads Numba, which `import torch` should not pay.
    from neuronsim.sim.chips import get_chip

    return get_chip(name)


def chip() -> ChipSpec:
    return _chip_named(current().chip)


_last_capacity: tuple = (None, 0)  # (options object, its capacity): options are frozen


def hbm_capacity_bytes() -> int:
    """Simulated HBM of one logical NeuronCore: the option's override, else the chip's figure."""
    global _last_capacity
    opts = current()
    if _last_capacity[0] is opts:
        return _last_capacity[1]
    capacity = (
        opts.hbm_bytes if opts.hbm_bytes is not None else _chip_named(opts.chip).hbm_bytes_per_logical_core
    )
    _last_capacity = (opts, capacity)
    return capacity


_last_core_count: tuple = (None, 0)


def logical_cores_per_instance() -> int:
    """The devices a process sees: every logical NeuronCore of one instance (the chip's logical
    cores x the instance's chips; trn2: 4 x 16 = 64, a trn2.48xlarge), as on TorchNeuron, where
    torchrun's LOCAL_RANK ranges over them."""
    global _last_core_count
    opts = current()
    if _last_core_count[0] is opts:
        return _last_core_count[1]
    from neuronsim.device.distributed.topology import interconnect_for_option

    spec = _chip_named(opts.chip)
    count = spec.logical_cores_per_chip * interconnect_for_option(opts.chip, spec).chips_per_instance
    _last_core_count = (opts, count)
    return count


def cast_64bit() -> bool:
    return current().cast_64bit
