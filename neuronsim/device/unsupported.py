"""What TorchNeuron does not support fails with an error naming the feature, never a crash.

Sparse tensors, NestedTensor, forward-mode AD and channels_last memory formats raise
:class:`~neuronsim.errors.UnsupportedError`, which becomes ``NotImplementedError`` at torch's boundary.
"""

from __future__ import annotations

import torch

from neuronsim.errors import UnsupportedError

_SPARSE_LAYOUTS = {
    torch.sparse_coo: "sparse COO",
    torch.sparse_csr: "sparse CSR",
    torch.sparse_csc: "sparse CSC",
    torch.sparse_bsr: "sparse BSR",
    torch.sparse_bsc: "sparse BSC",
}
_CHANNELS_LAST = (torch.channels_last, torch.channels_last_3d)


def unsupported(feature: str, hint: str = "") -> UnsupportedError:
    return UnsupportedError(
        f"{feature} {'is' if not feature.endswith('s') else 'are'} not supported on the "
        f"neuron device (as on TorchNeuron){'; ' + hint if hint else ''}"
    )


def check_layout(layout) -> None:
    if layout in _SPARSE_LAYOUTS:
        raise unsupported(f"{_SPARSE_LAYOUTS[layout]} tensors", "keep sparse tensors on the CPU")
    if layout is not None and layout != torch.strided:
        raise unsupported(f"tensors with layout {layout}")


def check_memory_format(memory_format) -> None:
    if memory_format in _CHANNELS_LAST:
        raise unsupported(
            f"{str(memory_format).replace('torch.', '')} memory format",
            "Neuron only supports contiguous/preserve memory format",
        )


def sparse_kernel(op, *args, **kwargs):
    raise NotImplementedError(str(unsupported("sparse tensors", f"{op.name()} was called on one")))


def nested_kernel(op, *args, **kwargs):
    raise NotImplementedError(str(unsupported("NestedTensors", f"{op.name()} was called on one")))


def forward_ad_kernel(*args, **kwargs):
    raise NotImplementedError(
        str(unsupported("forward-mode AD (dual tensors, torch.func.jvp)", "use reverse-mode autograd"))
    )


def guard_nested_tensors() -> None:
    """Ops on strided NestedTensors reach the NestedTensorPrivateUse1 fallback, but constructors
    build them in C++ from CPU parts, and jagged NestedTensors are a Python subclass over plain
    tensors that no dispatch key sees: refuse both at construction."""
    import torch.nested
    from torch.nested._internal.nested_tensor import NestedTensor

    for name in ("nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged", "narrow"):
        setattr(torch.nested, name, _refusing_neuron_results(getattr(torch.nested, name)))

    original_init = NestedTensor.__init__
    if getattr(original_init, "__neuronsim_guard__", False):
        return

    def __init__(self, values, offsets, *args, **kwargs):
        if values.device.type == "neuron":
            raise NotImplementedError(str(unsupported("NestedTensors", "keep nested tensors on the CPU")))
        original_init(self, values, offsets, *args, **kwargs)

    __init__.__neuronsim_guard__ = True
    NestedTensor.__init__ = __init__


def _refusing_neuron_results(constructor):
    import functools

    @functools.wraps(constructor)
    def wrapper(*args, **kwargs):
        result = constructor(*args, **kwargs)
        if result.is_nested and result.device.type == "neuron":
            raise NotImplementedError(str(unsupported("NestedTensors", "keep nested tensors on the CPU")))
        return result

    return wrapper
