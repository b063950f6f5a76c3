"""Device memory is host memory: neuron tensors are CPU tensors relabelled through DLPack.

A CPU tensor exported with DLPack, its device field rewritten from kDLCPU to kDLExtDev (which torch
maps to PrivateUse1) and imported again is a storage-backed ``neuron`` tensor over the same bytes;
torch's DLPack context keeps the CPU owner alive until the neuron storage dies. The reverse relabel
gives a CPU view of a neuron tensor. Both are zero-copy. Fresh device memory is made by the
device's C++ library (:func:`empty_strided`). Allocation charges the HBM ledger.
"""

from __future__ import annotations

import ctypes

import torch

from neuronsim.device import hbm, settings

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


def empty_strided(size, stride, dtype: torch.dtype, index: int, nbytes: int | None = None) -> torch.Tensor:
    """Allocate a neuron tensor; checks the HBM budget before touching host memory. ``nbytes``:
    its storage bytes when the caller knows it (a cached kernel's outputs)."""
    if nbytes is None:
        nbytes = storage_bytes(size, stride, dtype)
    ledger = hbm.ledger(index)
    scalar_type = _scalar_types().get(dtype)
    if scalar_type is not None:
        t = _empty(ledger.handle, settings.hbm_capacity_bytes(), index, scalar_type, size, stride, nbytes)
        if t is not None:
            return t
        # over capacity (check raises), or the host had no memory (torch's route raises its error)
    ledger.check(nbytes)
    t = _relabel(torch.empty_strided(size, stride, dtype=dtype), _KDL_EXT_DEV | (index << 32))
    ledger.charge(t.untyped_storage(), nbytes)  # a fresh CPU tensor always exports (adopt's retry is moot)
    return t


def fresh_outputs(specs: tuple, index: int) -> list[torch.Tensor]:
    """New neuron tensors for a cached kernel's outputs: ``specs`` is :func:`output_specs`'s."""
    ledger = hbm.ledger(index)
    capacity = settings.hbm_capacity_bytes()
    out = []
    for size, stride, scalar_type, nbytes, dtype in specs:
        t = None if scalar_type is None else _empty(ledger.handle, capacity, index, scalar_type, size, stride,
                                                     nbytes)
        out.append(empty_strided(size, stride, dtype, index, nbytes) if t is None else t)
    return out


def output_specs(shapes) -> tuple:
    """What :func:`fresh_outputs` takes for outputs of ``shapes``: (size, stride, dtype, nbytes)."""
    numbers = _scalar_types()
    return tuple((tuple(size), tuple(stride), numbers.get(dtype), nbytes, dtype)
                 for size, stride, dtype, nbytes in shapes)


def empty(size, dtype: torch.dtype, index: int) -> torch.Tensor:
    """A contiguous neuron tensor."""
    strides, step = [], 1
    for s in reversed(size):
        strides.append(step)
        step *= max(s, 1)
    strides.reverse()
    return empty_strided(size, strides, dtype, index, step * dtype.itemsize if all(size) else 0)


# Fresh device memory comes from the device's C++ library (cpp/neuron_memory.cpp): one call makes
# the storage, charges the ledger and wraps the tensor, and the storage's deleter releases it — a
# third of the DLPack route's cost, which every cached native op's output pays. It takes c10's
# ScalarType numbers, matched to torch dtypes by c10's names (no enum value assumed); a dtype not
# matched takes the torch route.
_C10_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2",
}
_scalar_type_numbers: dict[torch.dtype, int] | None = None
_empty = None


def _scalar_types() -> dict[torch.dtype, int]:
    global _scalar_type_numbers, _empty
    if _scalar_type_numbers is None:
        from neuronsim.device import cpp

        library = cpp.load()
        numbers, i = {}, 0
        while name := library.neuronsim_scalar_type_name(i):
            numbers[name.decode()] = i
            i += 1
        _empty = library.neuronsim_empty
        _scalar_type_numbers = {d: numbers[n] for d, n in _C10_NAMES.items() if n in numbers}
    return _scalar_type_numbers


def storage_bytes(size, stride, dtype: torch.dtype) -> int:
    extent = 1  # one loop, no generators: every allocation of an op's output computes this
    for s, st in zip(size, stride, strict=True):
        if s == 0:
            return 0
        extent += (s - 1) * st
    return extent * dtype.itemsize
