"""TorchNeuron's 64-bit policy: float64 and int64 ops compute in 32 bits and are cast back.

The chip has no 64-bit datapath, so users see fp32/int32 precision in 64-bit tensors. Copies are
exempt (they move bytes; 64-bit casts go through the host exactly). ``cast_64bit=False``
(``NEURON_SIM_CAST_64BIT=0``) computes in 64 bits instead.
"""

from __future__ import annotations

import torch

NARROW = {torch.float64: torch.float32, torch.int64: torch.int32}
WIDE = {torch.float32: torch.float64, torch.int32: torch.int64}

# Ops whose host (ATen-CPU) kernels insist on int64 indices (gather/scatter, nll_loss targets...).
# Index values are the same in 32 bits, so these keep int64 indices and narrow float64 only.
# Learned on first failure, per op.
_needs_int64: set[str] = set()


def needs_int64(name: str) -> bool:
    return name in _needs_int64


def learn_needs_int64(name: str) -> None:
    _needs_int64.add(name)


def cast_back_targets(narrowed: set, plan, args, kwargs) -> set:
    """32-bit result dtypes to widen back: those produced by narrowing, unless the caller asked
    for a 32-bit dtype explicitly (``sum(x64, dtype=torch.float32)`` stays float32)."""
    from neuronsim.device.schema import get_arg

    for ref in plan.dtype_args:
        requested = get_arg(args, kwargs, ref)
        if requested is not None and requested not in NARROW:
            return set()
    return {NARROW[d] for d in narrowed}
