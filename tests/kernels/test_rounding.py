"""Rounding and rounding divisions on VectorE: exact against ATen-CPU, edge values included."""

from __future__ import annotations

import pytest
import torch

EDGES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, -0.0, 0.49999997, 2.0**23 + 1, -(2.0**24), 1e30, 7.0,
         float("inf"), float("-inf"), float("nan")]


def _values(dtype, n=157):
    torch.manual_seed(0)
    return torch.cat([torch.randn(n) * 40, torch.tensor(EDGES)]).to(dtype)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rounding_is_exact_on_edges_and_halves(dtype):
    x = _values(dtype)
    d = x.to("neuron")
    for name in ("trunc", "floor", "ceil", "frac", "round", "deg2rad", "rad2deg", "isnan"):
        _exact(getattr(torch, name)(d), getattr(torch, name)(x))
    d.floor_()
    _exact(d, x.floor())
    assert torch.neuron.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_divisions_round_as_aten(dtype):
    a = _values(dtype)
    b = (torch.randn(a.numel()) * 3).to(dtype)
    b[:4] = torch.tensor([0.0, -0.0, -2.0, 2.0])
    da, db = a.to("neuron"), b.to("neuron")
    for mode in ("trunc", "floor"):
        _exact(torch.div(da, db, rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
        _exact(torch.div(da, -2.5, rounding_mode=mode), torch.div(a, -2.5, rounding_mode=mode))
    _exact(torch.floor_divide(da, db), torch.floor_divide(a, b))
    _exact(torch.remainder(da, db), torch.remainder(a, b))
    _exact(da % 3.0, a % 3.0)
    assert torch.neuron.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_floor_division_and_remainder(dtype):
    torch.manual_seed(1)
    a = torch.randint(-5000, 5000, (40, 7), dtype=dtype)
    b = torch.randint(1, 60, (7,), dtype=dtype) * torch.tensor([1, -1, 1, -1, 1, 1, -1], dtype=dtype)
    da, db = a.to("neuron"), b.to("neuron")
    _exact(da // db, a // b)
    _exact(da % db, a % b)
    _exact(da // 8, a // 8)
    _exact(da % -3, a % -3)
    assert torch.neuron.get_fallback_ops() == []
    # ATen's own error for a zero divisor, and exactness beyond 2**24 on the host
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        da // torch.zeros_like(db)
    big = torch.tensor([2**30 + 1], dtype=dtype)
    _exact(big.to("neuron") // 3, big // 3)
    assert "aten::floor_divide" in torch.neuron.get_fallback_ops()
