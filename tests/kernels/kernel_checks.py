"""Checks shared by the kernel tests: each op on the device against ATen-CPU on the same inputs.
(A module of its own, not conftest: test directories each have a conftest, and ``from conftest``
would import whichever was loaded first.)"""

from __future__ import annotations

import torch

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


def ran_only_natively(name: str) -> bool:
    """Ran as a kernel Program and never fell back to the host in this process."""
    return ran_natively(name) and name not in torch.neuron.get_fallback_ops()


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit-identical to ATen-CPU's result (NaN payloads and signed zeros included)."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    assert torch.equal(got.contiguous().view(bits), want.contiguous().view(bits))
