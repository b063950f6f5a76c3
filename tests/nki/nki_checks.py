"""Helpers shared by the NKI frontend tests (not in conftest: see tests/kernels/kernel_checks.py)."""

import inspect
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

BF16 = np.dtype(ml_dtypes.bfloat16)


def assert_close(out, ref, dtype):
    """fp32 to a tight tolerance; 16-bit results to bf16 precision (8 significant bits)."""
    out = np.asarray(out).astype(np.float32)
    ref = np.asarray(ref, dtype=np.float32)
    assert out.shape == ref.shape
    if np.dtype(dtype) == np.float32:
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(ref).max())))
    else:
        np.testing.assert_allclose(out, ref, rtol=2**-7, atol=2**-6 * max(1.0, float(np.abs(ref).max())))


def raises_at(kernel, arrays, error, match):
    """Tracing ``kernel`` raises ``error`` matching ``match`` naming the line marked ``# <- here``."""
    with pytest.raises(error, match=match) as info:
        kernel.specialize(arrays)
    source, first = inspect.getsourcelines(kernel.fn)
    line = first + next(i for i, text in enumerate(source) if "# <- here" in text)
    assert f"{Path(inspect.getsourcefile(kernel.fn)).name}:{line}" in str(info.value)
