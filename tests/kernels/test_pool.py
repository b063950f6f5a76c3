"""Pooling kernels (kernels/pool.py): max pooling with indices, average and adaptive average
pooling, forward and backward, against ATen-CPU on the same inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.pool  # noqa: F401  (registers the real kernels before the manifest lists them)


def _run(fn, dev, x, weights):
    leaf = x.detach().to(dev).requires_grad_()
    out = fn(leaf)
    outs = out if isinstance(out, tuple) else (out,)
    outs[0].backward(weights.to(dev))
    return [t.detach().cpu() for t in outs] + [leaf.grad.cpu()]


def _compare(fn, x, ops, exact_grad=True):
    y = fn(x)
    y = y[0] if isinstance(y, tuple) else y
    weights = torch.linspace(0.5, 1.5, y.numel()).reshape(y.shape).to(x.dtype)  # a distinct grad per output
    want = _run(fn, "cpu", x, weights)
    torch.neuron.clear_op_tracking()
    got = _run(fn, "neuron", x, weights)
    assert all(ran_natively(op) for op in ops), torch.neuron.get_executed_ops()
    assert torch.neuron.get_fallback_ops() == []
    *values, grad = zip(got, want, strict=True)
    for g, w in values:  # values and indices: bit for bit
        assert torch.equal(g, w)
    # fp32: the same sums in the same order; bf16: ATen rounds each step of a gradient sum to bf16
    # (a few ulps over up to 9 steps), the engines once
    exact = x.dtype == torch.float32 and exact_grad
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 2**-5, "atol": 2**-5}
    torch.testing.assert_close(*grad, **tol)


MAX = ("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")
AVG = ("aten::avg_pool2d", "aten::avg_pool2d_backward")
ADAPTIVE = ("aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("args", [
    pytest.param((2,), id="k2"),
    pytest.param((3, 2, 1), id="k3-s2-p1"),
    pytest.param((3, 1, 1, 2, True), id="dilated-ceil"),
    pytest.param(((2, 3), (2, 1), (1, 0)), id="rectangular"),
])
def test_max_pool2d_values_indices_and_gradient(args, dtype):
    x = torch.randn(3, 50, 9, 11).to(dtype)  # 150 planes: two tiles, odd sizes
    _compare(lambda t: F.max_pool2d(t, *args, return_indices=True), x, MAX)


def test_max_pool_nan_and_minus_inf_pick_aten_s_index():
    x = torch.randn(1, 3, 4, 4)
    x[0, 0, 0, 0], x[0, 0, 2, 2] = float("nan"), float("nan")  # the last NaN of a window wins
    x[0, 1] = float("-inf")  # every value -inf: the first in-bounds element
    x[0, 2, 1:3, 1:3] = float("inf")
    got = [t.cpu() for t in F.max_pool2d(x.to("neuron"), 3, 1, 1, return_indices=True)]
    want = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs", [
    pytest.param({"kernel_size": 2}, id="k2"),
    pytest.param({"kernel_size": 3, "stride": 2, "padding": 1}, id="k3-s2-p1"),
    pytest.param({"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
                 id="ceil-exclude-pad"),
    pytest.param({"kernel_size": 3, "stride": 1, "padding": 1, "divisor_override": 5}, id="divisor-override"),
])
def test_avg_pool2d_matches_cpu(kwargs, dtype):
    x = torch.randn(2, 70, 9, 11).to(dtype)
    _compare(lambda t: F.avg_pool2d(t, **kwargs), x, AVG)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(3, 11), (4, 5), (2, 2)])
def test_adaptive_avg_pool2d_matches_cpu(size, dtype):
    x = torch.randn(2, 3, 9, 11).to(dtype)
    _compare(lambda t: F.adaptive_avg_pool2d(t, size), x, ADAPTIVE)


def test_1d_pooling_and_unbatched_inputs_reach_the_2d_kernels():
    x = torch.randn(4, 5, 12)
    _compare(lambda t: F.max_pool1d(t, 3, 2, 1, return_indices=True), x, MAX)
    _compare(lambda t: F.avg_pool1d(t, 3, 2, 1), x, AVG)
    _compare(lambda t: F.max_pool2d(t, 2, return_indices=True), torch.randn(200, 7, 7), MAX)


def test_planes_too_large_for_a_tile_fall_back():
    x = torch.randn(1, 2, 128, 128)
    got = F.max_pool2d(x.to("neuron"), 2)
    assert torch.equal(got.cpu(), F.max_pool2d(x, 2))
    assert "aten::max_pool2d_with_indices" in torch.neuron.get_fallback_ops()
