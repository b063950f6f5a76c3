"""``neuronxcc.nki.typing``: the tensor annotations of NKI 0.1 kernels (``tensor[128, 512]``), the same
annotation objects as the current ``nki.typing`` (``mutable_tensor`` marks an argument the kernel
writes; later 0.x releases and AWS's kernel library use it)."""

from __future__ import annotations

from neuronsim.nki.typing import TensorType, mutable_tensor, tensor

scalar = TensorType(False)

__all__ = ["TensorType", "mutable_tensor", "scalar", "tensor"]
