"""ATen ops as NKI kernels: the device's native ops (one module per op family).

A family module registers a *planner* per ATen op with :func:`neuronsim.kernels.registry.native`.
On the first call of a signature (op, shapes, strides, dtypes, scalar args) the planner decides
whether its kernel covers it and how; the kernel is traced into a Program, scheduled, and cached
with everything a later call needs (see ``registry.py``). Later calls run the cached Program on the
device tensors in place (they are the simulated HBM) and charge its schedule to the device clock.

:func:`install` runs when the device registers. It must not import the NKI frontend (which loads
the simulator and Numba — ``import torch`` under ``NEURON_SIM=1`` should not pay for that), so it
registers a lazy stub per op named in :data:`FAMILIES`; a family module is imported at the first
call of one of its ops. ``tests/kernels/test_registry.py`` checks that the manifest and the
modules agree.
"""

from __future__ import annotations

import importlib

# family module -> the ATen ops it registers
FAMILIES: dict[str, tuple[str, ...]] = {
    "neuronsim.kernels.elementwise": (
        "aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor",
        "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::div_.Tensor",
        "aten::exp.default", "aten::tanh.default", "aten::relu.default", "aten::sigmoid.default",
        "aten::gelu.default",
    ),
    "neuronsim.kernels.copy": ("aten::copy_.default",),
    "neuronsim.kernels.matmul": ("aten::mm.default", "aten::addmm.default"),
}


def op_overload(name: str):
    """``torch.ops.aten.add.Tensor`` from ``"aten::add.Tensor"``."""
    import torch

    namespace, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")


class _LazyFamily:
    """Stands in for a family's kernels until one of its ops is first called."""

    def __init__(self, module: str):
        self.module = module

    def __call__(self, op, args, kwargs):
        from neuronsim.device import dispatch

        importlib.import_module(self.module)  # registers the real kernels, replacing the stubs
        real = dispatch.NATIVE_KERNELS.get(op)
        if real is None or real is self:
            return NotImplemented
        return real(op, args, kwargs)


def install() -> None:
    """Register every family's ops with the device's chokepoint (lazily, see the module doc)."""
    from neuronsim.device import dispatch

    for module, names in FAMILIES.items():
        stub = _LazyFamily(module)
        for name in names:
            op = op_overload(name)
            if op not in dispatch.NATIVE_KERNELS:
                dispatch.register_native_kernel(op, stub)


def uninstall() -> None:
    """Remove every kernel of this package from the chokepoint (everything falls back)."""
    from neuronsim.device import dispatch

    for names in FAMILIES.values():
        for name in names:
            dispatch.unregister_native_kernel(op_overload(name))
