"""Device tensors as a Program's HBM tensors, in place: aliasing between operands and binding.

A kernel's operand is a 1-D HBM tensor over the span of its tensor's elements (``kernels/bridge.py``).
At run time the Program's HBM tensor is bound to the tensor's data pointer (the Numba executor takes
raw base addresses); the reference executor gets zero-copy numpy views of the same bytes
(:func:`bind_arrays`). Whether two device tensors are the same view, disjoint or overlapping decides
which in-place calls a kernel may take.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from neuronsim.device.memory import host_view
from neuronsim.kernels.bridge import span_of


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


def disjoint(tensors) -> bool:
    """No two of ``tensors`` share memory (spans, as :func:`overlaps`)."""
    spans = sorted((t.data_ptr(), t.data_ptr() + span_of(t.shape, t.stride()) * t.element_size())
                   for t in tensors)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


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
