"""TorchNeuron's 64-bit policy: float64 and int64 ops compute in 32 bits and are cast back.

The chip has no 64-bit datapath, so users see fp32/int32 precision in 64-bit tensors. Copies are
exempt (they move bytes; 64-bit casts go through the host exactly). ``cast_64bit=False``
(``NEURON_SIM_CAST_64BIT=0``) computes in 64 bits instead.

Where ATen-CPU has no kernel for the 32-bit dtype (its error says ``not implemented for 'Int'``;
probing PyTorch's OpInfo samples finds avg_pool1d/2d/3d, conv_transpose1d/2d/3d and
local_response_norm on int32), the op is computed in 64 bits instead, learned per op on the first
such failure, so no list of ops is kept by hand.
"""

from __future__ import annotations

import re

import torch

NARROW = {torch.float64: torch.float32, torch.int64: torch.int32}
WIDE = {torch.float32: torch.float64, torch.int32: torch.int64}

# 64-bit dtypes an op's host (ATen-CPU) kernels need kept, learned per op on the first failure:
# int64 for kernels that insist on int64 indices (gather/scatter, nll_loss targets: index values are
# the same in 32 bits), and the dtype a kernel lacks a 32-bit version of.
_kept: dict[str, frozenset] = {}
_NO_KERNEL = re.compile(r"not implemented for '(Int|Float)'")
_WIDENED = {"Int": torch.int64, "Float": torch.float64}


def kept_64bit(name: str) -> frozenset:
    return _kept.get(name, frozenset())


def learn_kept_64bit(name: str, dtype: torch.dtype) -> None:
    _kept[name] = kept_64bit(name) | {dtype}


def narrowed_without_kernel(exc: BaseException, narrowed: set) -> torch.dtype | None:
    """The 64-bit dtype whose 32-bit version ``exc`` says ATen-CPU has no kernel for, if the policy
    narrowed it."""
    found = _NO_KERNEL.search(str(exc))
    wide = _WIDENED[found.group(1)] if found else None
    return wide if wide in narrowed else None


def cast_back_targets(narrowed: set, plan, args, kwargs) -> set:
    """32-bit result dtypes to widen back: those produced by narrowing, unless the caller asked
    for a 32-bit dtype explicitly (``sum(x64, dtype=torch.float32)`` stays float32)."""
    from neuronsim.device.schema import get_arg

    for ref in plan.dtype_args:
        requested = get_arg(args, kwargs, ref)
        if requested is not None and requested not in NARROW:
            return set()
    return {NARROW[d] for d in narrowed}
