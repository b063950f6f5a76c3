"""Device memory is host memory: neuron tensors are CPU tensors relabelled through DLPack.

A CPU tensor exported with DLPack, its device field rewritten from kDLCPU to kDLExtDev (which torch
maps to PrivateUse1) and imported again is a storage-backed ``neuron`` tensor over the same bytes;
torch's DLPack context keeps the CPU owner alive until the neuron storage dies. The reverse relabel
gives a CPU view of a neuron tensor. Both are zero-copy. Allocation charges the HBM ledger.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from neuronsim.device import hbm

_KDL_CPU = 1
_KDL_EXT_DEV = 12  # torch maps DLPack's kDLExtDev to PrivateUse1
_DEVICE_FIELD_OFFSET = 8  # DLTensor = {void* data; DLDevice device{int32 type; int32 id}; ...}

_int64_at = ctypes.c_int64.from_address
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack


def _capsule_pointer_offset() -> int:
    """Where a PyCapsule object keeps its pointer (after the object header): reading it there is
    one ctypes call less per relabel than PyCapsule_GetPointer, the costliest line of the device's
    per-op overhead. Checked against PyCapsule_GetPointer once, here."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    capsule = _to_dlpack(torch.empty(1))
    offset = 2 * ctypes.sizeof(ctypes.c_void_p)  # PyObject_HEAD: refcount, type
    if _int64_at(id(capsule) + offset).value != get_pointer(capsule, b"dltensor"):
        raise RuntimeError("unexpected PyCapsule layout: cannot relabel tensors through DLPack")
    return offset


_POINTER_OFFSET = _capsule_pointer_offset()


def _relabel(t: torch.Tensor, device_word: int = _KDL_CPU) -> torch.Tensor:
    capsule = _to_dlpack(t)
    _int64_at(_int64_at(id(capsule) + _POINTER_OFFSET).value + _DEVICE_FIELD_OFFSET).value = device_word
    return _from_dlpack(capsule)


# host_view(t): a CPU tensor over the same bytes as neuron tensor ``t`` (same sizes and strides).
# The relabel itself, not a wrapper: it runs for every device tensor argument of every host call.
host_view = _relabel


def adopt(host: torch.Tensor, index: int) -> torch.Tensor:
    """Make a fresh CPU tensor a neuron tensor on ``neuron:index``, charging its bytes to that HBM."""
    try:
        t = _relabel(host, _KDL_EXT_DEV | (index << 32))
    except (RuntimeError, BufferError, TypeError):
        t = _relabel(_exportable(host), _KDL_EXT_DEV | (index << 32))
    hbm.ledger(index).charge(t.untyped_storage())
    return t


def _exportable(host: torch.Tensor) -> torch.Tensor:
    # DLPack refuses lazy conj/neg bits; materialise them. Other layouts are unsupported.
    from neuronsim.device.unsupported import check_layout

    check_layout(host.layout)
    return host.resolve_conj().resolve_neg()


def empty_strided(size, stride, dtype: torch.dtype, index: int, nbytes: int | None = None,
                  contiguous: bool = False) -> torch.Tensor:
    """Allocate a neuron tensor; checks the HBM budget before touching host memory. ``nbytes``:
    its storage bytes when the caller knows it (a cached kernel's outputs); ``contiguous``: the
    caller knows ``stride`` is ``size``'s row-major one."""
    if nbytes is None:
        nbytes = storage_bytes(size, stride, dtype)
    ledger = hbm.ledger(index)
    ledger.check(nbytes)
    as_numpy = _NUMPY_DTYPES.get(dtype) if contiguous and nbytes else None
    if as_numpy is not None:
        return _fresh_from_numpy(size, as_numpy, index, ledger, nbytes)
    t = _relabel(torch.empty_strided(size, stride, dtype=dtype), _KDL_EXT_DEV | (index << 32))
    ledger.charge(t.untyped_storage(), nbytes)  # a fresh CPU tensor always exports (adopt's retry is moot)
    return t


def empty(size, dtype: torch.dtype, index: int) -> torch.Tensor:
    """A contiguous neuron tensor."""
    numel = 1
    for s in size:
        numel *= s
    nbytes = numel * dtype.itemsize
    ledger = hbm.ledger(index)
    ledger.check(nbytes)
    as_numpy = _NUMPY_DTYPES.get(dtype) if nbytes else None
    if as_numpy is not None:
        return _fresh_from_numpy(tuple(size), as_numpy, index, ledger, nbytes)
    t = _relabel(torch.empty(size, dtype=dtype), _KDL_EXT_DEV | (index << 32))
    ledger.charge(t.untyped_storage(), nbytes)
    return t


# Fresh contiguous host memory of these dtypes comes from numpy, exported through DLPack straight
# to the device (no CPU tensor to make and export first): half the cost of the torch route, which
# every cached native op's output pays. The ledger follows the numpy array, which the device
# storage owns and frees with it (no Python storage object to make and keep). Other dtypes
# (bfloat16, the fp8 types) take the torch route.
_NUMPY_DTYPES = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}


def _fresh_from_numpy(size, dtype, index: int, ledger: hbm.HbmLedger, nbytes: int) -> torch.Tensor:
    host = np.empty(size, dtype)
    capsule = host.__dlpack__()
    _int64_at(_int64_at(id(capsule) + _POINTER_OFFSET).value + _DEVICE_FIELD_OFFSET).value = \
        _KDL_EXT_DEV | (index << 32)
    t = _from_dlpack(capsule)
    ledger.charge(host, nbytes)
    return t


def storage_bytes(size, stride, dtype: torch.dtype) -> int:
    extent = 1  # one loop, no generators: every allocation of an op's output computes this
    for s, st in zip(size, stride, strict=True):
        if s == 0:
            return 0
        extent += (s - 1) * st
    return extent * dtype.itemsize
