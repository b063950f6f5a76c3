"""``nl`` tensor creation: ``ndarray``, ``zeros``/``ones``/``full`` (and ``*_like``), the shared
identity matrix and constants. On-chip fills are VectorE memsets; HBM tensors are filled by the host."""

from __future__ import annotations

import os

import numpy as np

from neuronsim.errors import InputError
from neuronsim.nki import isa as _isa
from neuronsim.nki import types as _types
from neuronsim.nki.language.dtypes import sbuf, shared_hbm
from neuronsim.nki.language.tensor import NkiTensor, alloc
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import to_sim_dtype
from neuronsim.sim.ir import AluOp


def ndarray(shape, dtype, buffer=None, name="", address=None) -> NkiTensor:
    """A new, uninitialized tensor of ``shape`` and ``dtype`` in ``buffer`` (default ``nl.sbuf``)."""
    return alloc(shape, dtype, buffer, name, address)


def full(shape, fill_value, dtype, buffer=None, name="") -> NkiTensor:
    """A new tensor filled with ``fill_value`` (memset on VectorE; HBM tensors are filled by the host)."""
    t = alloc(shape, dtype, buffer, name, tag="full")
    if t.on_chip:
        _isa.memset(t, fill_value)
    else:
        current_trace().hbm_fill[t.buf.id] = float(fill_value)
    return t


def zeros(shape, dtype, buffer=None, name="") -> NkiTensor:
    return full(shape, 0.0, dtype, buffer, name)


def ones(shape, dtype, buffer=None, name="") -> NkiTensor:
    return full(shape, 1.0, dtype, buffer, name)


def empty_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return ndarray(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def zeros_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return zeros(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def ones_like(a, dtype=None, buffer=None, name="") -> NkiTensor:
    return ones(a.shape, a.dtype if dtype is None else dtype, a.buffer if buffer is None else buffer, name)


def shared_identity_matrix(n, dtype="uint8") -> NkiTensor:
    """An ``n x n`` identity in SBUF (built once per kernel and dtype: memset + affine_select on GpSimd)."""
    trace = current_trace()
    key = (int(n), to_sim_dtype(dtype))
    hit = trace.identity.get(key)
    if hit is not None:
        return hit
    ones_tile = alloc((n, n), dtype, sbuf, tag="identity.ones")
    _isa.memset(ones_tile, 1.0, engine=_isa.engine.gpsimd)
    eye = alloc((n, n), dtype, sbuf, name="identity", tag="identity")
    # value(p, f) = p - f; keep the ones where it is 0 (the diagonal)
    _isa.affine_select(eye, [[-1, n]], 1, ones_tile, 0.0, cmp_op=AluOp.equal)
    trace.identity[key] = eye
    return eye


def shared_constant(constant, dtype=None) -> NkiTensor:
    """An HBM tensor holding ``constant`` (a numpy array, or the path of a ``.npy`` file), bound as
    an input when the kernel runs."""
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"nl.shared_constant: cannot read {os.fspath(constant)!r} as a .npy "
                             f"array ({exc})", location=caller_location()) from None
    arr = np.asarray(constant)
    d = to_sim_dtype(arr.dtype if dtype is None else dtype)
    trace = current_trace()
    t = alloc(arr.shape, d, shared_hbm, name="constant")
    t.buf.kind = "input"
    trace.constants[t.buf.id] = np.ascontiguousarray(arr.astype(_types.numpy_dtype(d)))
    return t
