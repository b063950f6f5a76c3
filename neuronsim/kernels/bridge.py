"""How a torch tensor appears to a kernel: its NeuronCore dtype and its HBM view.

Each operand of a kernel is declared as a 1-D HBM tensor over the span of memory its elements
occupy (from its first element, ``data_ptr()``, to its last; torch strides are never negative).
Inside the kernel, :func:`hbm_view` gives it back its shape and strides as an access pattern, so
transposed, sliced and expanded (stride 0) tensors need no copy. At run time the device binds the
Program's HBM tensor to the tensor's bytes in place (``neuronsim/device/native/operands.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch

_NUMPY = {
    torch.float32: np.dtype(np.float32),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float16: np.dtype(np.float16),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The simulator's dtype for a torch dtype; None if the NeuronCore has no such dtype."""
    return _NUMPY.get(dtype)


@dataclass(frozen=True)
class Operand:
    """A tensor's layout as a kernel operand: its logical shape and strides over a 1-D span."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: np.dtype
    span: int  # elements from the first to the last one the tensor touches, inclusive

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize


def span_of(shape, stride) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True))


def operand_of(t: torch.Tensor) -> Operand:
    shape, stride = tuple(t.shape), tuple(t.stride())
    if t.dtype is torch.int64:
        # No 64-bit dtype on the chip: an int64 tensor is its int32 words, (low, high) pairs along a
        # trailing dim of 2 (little-endian), so a kernel DMAs the low words of index tensors.
        words = np.dtype(np.int32)
        return Operand((*shape, 2), (*(2 * s for s in stride), 1), words, 2 * span_of(shape, stride))
    dtype = numpy_dtype(t.dtype)
    if dtype is None:
        raise TypeError(f"{t.dtype} has no NeuronCore dtype")
    return Operand(shape, stride, dtype, span_of(shape, stride))


def dummy_array(op: Operand) -> np.ndarray:
    """A stand-in with the operand's HBM shape and dtype for tracing (no memory behind it)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=op.dtype), shape=(op.span,), strides=(0,))


def hbm_view(flat, op: Operand):
    """The NKI view of a traced 1-D HBM tensor with the operand's shape and strides."""
    if not op.shape:
        return flat.ap([[1, 1]], offset=0)
    return flat.ap([[st, n] for st, n in zip(op.stride, op.shape, strict=True)], offset=0)
