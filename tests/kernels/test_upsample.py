"""Upsampling kernels (kernels/upsample.py) against ATen-CPU, forward and backward: nearest by whole
factors of 1-d and 2-d inputs ('nearest' and 'nearest-exact', bit for bit) and to other sizes,
(bi)linear with and without align_corners; 3-d inputs on the host."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES

import neuronsim.kernels.upsample  # noqa: F401  (registers the real kernels before the manifest lists them)

CASES = [
    pytest.param((2, 3, 5, 7), {"scale_factor": 2}, "upsample_nearest2d", id="2x"),
    pytest.param((2, 3, 5, 7), {"size": (15, 14)}, "upsample_nearest2d", id="size-3x2"),
    pytest.param((2, 3, 11), {"scale_factor": 4}, "upsample_nearest1d", id="1d-4x"),
    pytest.param((1, 130, 4, 4), {"scale_factor": 2, "mode": "nearest-exact"}, "_upsample_nearest_exact2d",
                 id="exact-planes-over-128"),
]


def _run(fn, x, dev, g):
    leaf = x.detach().to(dev).requires_grad_()
    y = fn(leaf)
    y.backward(g.to(dev))
    return y.detach().cpu(), leaf.grad.cpu()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "kwargs", "op"), CASES)
def test_whole_factors_match_cpu_exactly(shape, kwargs, op, dtype):
    torch.manual_seed(0)
    x = torch.randn(shape).to(dtype)

    def fn(t):
        return F.interpolate(t, **kwargs)

    g = torch.randn(fn(x).shape).to(dtype)
    want = _run(fn, x, "cpu", g)
    torch.neuron.clear_op_tracking()
    got = _run(fn, x, "neuron", g)
    assert {f"aten::{op}", f"aten::{op}_backward"} <= set(torch.neuron.get_executed_ops())
    assert not torch.neuron.get_fallback_ops()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs", [{"size": (8, 9)}, {"scale_factor": 0.6}, {"scale_factor": 1.7}])
def test_other_sizes_by_runs(kwargs, dtype):
    """Sizes that are no whole factor: the forward copies exactly; the backward's sums of more than
    two gradients may round differently from ATen's order."""
    torch.manual_seed(2)
    x = torch.randn(2, 3, 5, 7).to(dtype)

    def fn(t):
        return F.interpolate(t, **kwargs)

    g = torch.randn(fn(x).shape).to(dtype)
    want = _run(fn, x, "cpu", g)
    torch.neuron.clear_op_tracking()
    got = _run(fn, x, "neuron", g)
    assert not torch.neuron.get_fallback_ops()
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=1e-6 if dtype == torch.float32 else 2**-7, atol=1e-6)


def test_3d_runs_on_the_host():
    x = torch.randn(1, 2, 3, 4, 5)
    got = F.interpolate(x.to("neuron"), scale_factor=2)
    assert torch.equal(got.cpu(), F.interpolate(x, scale_factor=2))
    assert "aten::upsample_nearest3d" in torch.neuron.get_fallback_ops()


LINEAR = [
    pytest.param((2, 3, 5, 7), {"scale_factor": 2, "mode": "bilinear"}, id="bilinear-2x"),
    pytest.param((2, 3, 5, 7), {"size": (15, 9), "mode": "bilinear"}, id="bilinear-sizes"),
    pytest.param((1, 130, 4, 6), {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
                 id="bilinear-align-corners"),
    pytest.param((2, 3, 8, 8), {"size": (4, 4), "mode": "bilinear"}, id="bilinear-downsample"),
    pytest.param((2, 3, 11), {"scale_factor": 4, "mode": "linear"}, id="linear-1d"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "kwargs"), LINEAR)
def test_linear_modes_match_cpu(shape, kwargs, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape).to(dtype)

    def fn(t):
        return F.interpolate(t, **kwargs)

    g = torch.randn(fn(x).shape).to(dtype)
    want = _run(fn, x, "cpu", g)
    torch.neuron.clear_op_tracking()
    got = _run(fn, x, "neuron", g)
    assert not torch.neuron.get_fallback_ops()
    op = "aten::upsample_linear1d" if len(shape) == 3 else "aten::upsample_bilinear2d"
    assert {op, op + "_backward"} <= set(torch.neuron.get_executed_ops())
    # fp32: ATen may fuse a multiply-add; 16-bit: one rounding of the fp32 result either way
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2**-7, "atol": 2**-7}
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **tol)
