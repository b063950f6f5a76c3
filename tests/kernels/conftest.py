"""The kernel tests run on the emulated device, each op against ATen-CPU on the same inputs."""

from __future__ import annotations

import pytest
import torch

import neuronsim

neuronsim.enable()

DTYPES = (torch.float32, torch.bfloat16)


def tolerance(dtype: torch.dtype) -> dict:
    """fp32: a few ulps of fp32 (activations are not correctly rounded); 16-bit: two bf16 ulps
    (ATen rounds some intermediates to the 16-bit type, e.g. ``alpha * b``; the engines keep fp32)."""
    if dtype == torch.float32:
        return {"rtol": 2e-5, "atol": 2e-6}
    return {"rtol": 2**-6, "atol": 2**-7}


def assert_matches_cpu(device_result: torch.Tensor, cpu_result: torch.Tensor, **tol) -> None:
    assert device_result.device.type == "neuron"
    got = device_result.cpu()
    assert got.dtype == cpu_result.dtype and got.shape == cpu_result.shape
    torch.testing.assert_close(got, cpu_result, **(tol or tolerance(cpu_result.dtype)))


def ran_natively(name: str) -> bool:
    return name in torch.neuron.get_executed_ops()


@pytest.fixture(autouse=True)
def _fresh_op_tracking():
    torch.neuron.clear_op_tracking()
    yield
