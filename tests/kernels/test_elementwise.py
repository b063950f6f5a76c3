"""Element-wise binary ops with broadcasting (VectorE) and activations (ScalarE) against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
from conftest import DTYPES, assert_matches_cpu, ran_natively

SHAPES = [
    ((300, 70), (300, 70)),  # contiguous: flat tiles plus tails
    ((4, 33, 65), (65,)),  # bias-style broadcast along the partitions
    ((4, 33, 65), (4, 33, 1)),  # broadcast along the free dim
    ((2, 3, 40, 40), (2, 1, 40, 40)),  # attention-mask style
    ((5,), ()),  # a 0-dim device operand
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div])
def test_binary_with_broadcasting(op, shapes, dtype):
    torch.manual_seed(0)
    a, b = (torch.randn(s).to(dtype) for s in shapes)
    if op is torch.div:
        b = b.sign() * (b.abs() + 0.5)
    assert_matches_cpu(op(a.to("neuron"), b.to("neuron")), op(a, b))
    assert ran_natively(f"aten::{op.__name__}.Tensor")


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_scalars_transposes_and_in_place(dtype):
    torch.manual_seed(1)
    a, b = torch.randn(64, 48).to(dtype), torch.randn(48, 64).to(dtype)
    da, db = a.to("neuron"), b.to("neuron")
    assert_matches_cpu(torch.add(da, db.t(), alpha=0.25), torch.add(a, b.t(), alpha=0.25))
    assert_matches_cpu(torch.sub(da, db.t(), alpha=3), torch.sub(a, b.t(), alpha=3))
    assert_matches_cpu(da * 1.5, a * 1.5)
    assert_matches_cpu(da - 2, a - 2)
    assert_matches_cpu(torch.sub(da, 2, alpha=0.5), torch.sub(a, 2, alpha=0.5))
    assert_matches_cpu(da / 3.0, a / 3.0)
    da.mul_(db.t())
    a.mul_(b.t())
    assert_matches_cpu(da, a)
    assert torch.neuron.get_fallback_ops() == []


def test_mixed_dtypes_promote_as_aten_does():
    a = torch.randn(40, 30).to(torch.bfloat16)
    b = torch.randn(40, 30)
    out = a.to("neuron") + b.to("neuron")
    assert out.dtype == torch.float32
    assert_matches_cpu(out, a + b)


def test_non_float_dtypes_fall_back():
    x = torch.arange(10).to("neuron")
    torch.neuron.clear_op_tracking()
    assert (x * x).cpu().tolist() == [i * i for i in range(10)]
    assert torch.neuron.get_fallback_ops() == ["aten::mul.Tensor"]


ACTIVATIONS = [
    torch.exp, torch.tanh, torch.relu, torch.sigmoid,
    torch.nn.functional.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ACTIVATIONS)
def test_activations(fn, dtype):
    torch.manual_seed(2)
    x = (torch.randn(130, 257) * 2).to(dtype)
    assert_matches_cpu(fn(x.to("neuron")), fn(x))
    assert torch.neuron.get_fallback_ops() == []
