"""ATen ops as NKI kernels: the device's native ops (one module per op family).

A family module registers a *planner* per ATen op with :func:`neuronsim.kernels.registry.native`.
On the first call of a signature (op, shapes, strides, dtypes, scalar args) the planner decides
whether its kernel covers it and how; the device's native-op runtime (``neuronsim/device/native``)
traces the kernel into a Program (``launch.py``), schedules it and caches it with everything a
later call needs. Later calls run the cached Program on the device tensors in place (they are the
simulated HBM) and charge its schedule to the device clock.

``manifest.py`` names each family's ops, so the device can register them without importing the
families (which load NKI, the simulator and Numba). It is generated from the decorators (``python -m
neuronsim.kernels``) rather than written a second time by hand: what the families register is only
known by importing them (most names are built from tables, ``op_names(_ARITH, ...)``), and a scan of
the source could not evaluate those. ``tests/kernels/test_registry.py`` fails while it is stale.
"""

from __future__ import annotations

from neuronsim.kernels.registry import op_overload

__all__ = ["op_overload"]
