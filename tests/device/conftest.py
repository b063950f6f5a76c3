"""The device tests run in one process with the emulated device enabled once."""

from __future__ import annotations

import pytest
import torch

import neuronsim

neuronsim.enable()


@pytest.fixture
def no_native_kernels():
    """Every op takes the host fallback (the native-kernel registry emptied for one test)."""
    from neuronsim.device import dispatch

    saved = dict(dispatch.NATIVE_KERNELS)
    dispatch.NATIVE_KERNELS.clear()
    yield
    dispatch.NATIVE_KERNELS.update(saved)


@pytest.fixture(autouse=True)
def _restore_current_device():
    yield
    torch.neuron.set_device(0)


def run_on(device: str, fn, *args):
    """Run ``fn(device, *args)`` under the same seed; returns its result moved to the CPU."""
    torch.manual_seed(0)
    return to_cpu(fn(device, *args))


def to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value
