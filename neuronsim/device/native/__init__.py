"""The native-op runtime: the device's side of the kernels in ``neuronsim/kernels``.

The kernels fill a table (``kernels/registry.py``: op name -> planner and options); this package
turns each entry into the chokepoint's kernel for its op (``op.py``). A call's signature
(``signature.py``: shapes, strides, dtypes of its tensors, its scalar arguments, which written
operand is which input) selects a cache entry; the first call of a signature plans and traces it
(``build.py``), every call runs the entry (``entry.py``: gather the inputs, allocate the outputs,
execute the Program on the device tensors in place, charge the device clock).

:func:`install` runs when the device registers. It must not import the NKI frontend (which loads
the simulator and Numba — ``import torch`` under ``NEURON_SIM=1`` should not pay for that), so it
registers a lazy stub per op of the kernels' manifest; the stub imports the op's family module at
the first call of one of its ops and replaces the family's stubs by their native ops.
"""

from __future__ import annotations

import importlib

import torch

from neuronsim.device import dispatch
from neuronsim.kernels.manifest import FAMILIES
from neuronsim.kernels.registry import TABLE, op_overload


class _LazyFamily:
    """Stands in for a family's kernels until one of its ops is first called."""

    def __init__(self, module: str):
        self.module = module

    def __call__(self, op, args, kwargs):
        importlib.import_module(self.module)  # fills the kernels' table with the family's ops
        _register_family(self.module)
        real = dispatch.NATIVE_KERNELS.get(op)
        if real is None or real is self:
            return NotImplemented
        return real(op, args, kwargs)


def _register_family(module: str) -> None:
    from neuronsim.device.native.op import native_op

    for spec in list(TABLE.values()):
        if spec.family == module:
            op = op_overload(spec.name)
            current = dispatch.NATIVE_KERNELS.get(op)
            if current is None or isinstance(current, _LazyFamily):
                dispatch.register_native_kernel(op, native_op(op, spec))


def install() -> None:
    """Register every family's ops with the device's chokepoint (lazily, see the module doc)."""
    for module, names in FAMILIES.items():
        stub = _LazyFamily(module)
        for name in names:
            op = op_overload(name)
            if op not in dispatch.NATIVE_KERNELS:
                dispatch.register_native_kernel(op, stub)


def register(op: torch._ops.OpOverload) -> None:
    """Register the native op of ``op``, an op the kernels defined at run time (a fused region);
    once: its cache lives in it."""
    from neuronsim.device.native.op import native_op

    if op not in dispatch.NATIVE_KERNELS:
        dispatch.register_native_kernel(op, native_op(op, TABLE[op.name()]))


def entries(name: str) -> dict:
    """The cache of op ``name`` (signature key -> Entry, or the declined marker): for tests."""
    from neuronsim.device.native.op import NativeOp

    kernel = dispatch.NATIVE_KERNELS.get(op_overload(name))
    return kernel.entries if isinstance(kernel, NativeOp) else {}


def is_declined(entry) -> bool:
    from neuronsim.device.native.entry import DECLINED

    return entry is DECLINED
