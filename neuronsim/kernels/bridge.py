"""Device tensors as the Program's HBM tensors, in place.

Each operand of a kernel is declared as a 1-D HBM tensor over the span of memory its elements
occupy (from its first element, ``data_ptr()``, to its last; torch strides are never negative).
Inside the kernel, :func:`hbm_view` gives it back its shape and strides as an access pattern, so
transposed, sliced and expanded (stride 0) tensors need no copy. At run time the Program's HBM
tensor is bound to the tensor's data pointer (the Numba executor takes raw base addresses); the
reference executor gets zero-copy numpy views of the same bytes (:func:`bind_arrays`).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch

from neuronsim.device.memory import host_view

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


def _extent(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    if t.is_contiguous():  # the common case: its span is its bytes
        return start, start + t.nbytes
    return start, start + span_of(t.shape, t.stride()) * t.element_size()


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.data_ptr() == b.data_ptr()
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of ``a`` and ``b`` intersect (conservative: spans, not elements)."""
    a0, a1 = _extent(a)
    b0, b1 = _extent(b)
    return a0 < b1 and b0 < a1


def aliasing(a: torch.Tensor, b: torch.Tensor) -> bool | None:
    """True if ``a`` and ``b`` are the same view, False if their spans are disjoint, None if they
    overlap otherwise (one pass: in-place ``_foreach_`` ops ask it for every pair, every call)."""
    a0, a1 = _extent(a)
    b0, b1 = _extent(b)
    if a0 == b0 and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride():
        return True
    return None if a0 < b1 and b0 < a1 else False


def span_array(t: torch.Tensor) -> np.ndarray:
    """A zero-copy 1-D numpy view of the span of device tensor ``t`` (or CPU tensor: runtime scalars)."""
    h = t if t.is_cpu else host_view(t)
    flat = torch.as_strided(h, (span_of(t.shape, t.stride()),), (1,))
    if t.dtype is torch.bfloat16:
        return flat.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype is torch.int64:
        return flat.numpy().view(np.int32)  # its int32 words, as operand_of declares it
    return flat.numpy()


def bind_arrays(program, slots, operands, fixed) -> dict[str, np.ndarray]:
    """The Program's HBM tensors by name, as numpy views of the operands (reference executor)."""
    by_id = {t.id: t for t in program.hbm_tensors()}
    arrays = {by_id[tid].name: span_array(operands[k]) for tid, k in slots}
    for tid, a in fixed.items():
        arrays[by_id[tid].name] = a
    return arrays
