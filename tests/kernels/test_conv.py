"""Convolution kernels (kernels/conv.py, conv_backward.py): conv1d/conv2d, transposed, grouped,
strided, padded and dilated, forward and backward, against ATen-CPU on the same inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.conv  # noqa: F401  (registers the real kernels before the manifest lists them)
import neuronsim.kernels.conv_backward  # noqa: F401

FWD, BWD = "aten::convolution", "aten::convolution_backward"

# (N, C_in, H, W, C_out, kernel, stride, padding, dilation, groups, bias)
CONV2D = [
    pytest.param((2, 3, 9, 11, 5, 3, 1, 0, 1, 1, True), id="3x3-odd-sizes"),
    pytest.param((2, 4, 10, 10, 6, 3, 2, 1, 1, 2, False), id="strided-grouped"),
    pytest.param((1, 3, 7, 8, 4, 3, 1, 2, 2, 1, True), id="dilated"),
    pytest.param((3, 130, 6, 5, 140, 3, 1, 1, 1, 1, True), id="channels-over-128"),
    pytest.param((2, 5, 13, 3, 7, (2, 3), (1, 2), (1, 0), 1, 1, True), id="rectangular"),
    pytest.param((70, 2, 8, 8, 3, 1, 1, 0, 1, 1, True), id="1x1-many-images"),
]
# (N, C_in, H, W, C_out, kernel, stride, padding, output_padding, groups, bias)
TRANSPOSED = [
    pytest.param((2, 6, 5, 5, 4, 4, 2, 1, 0, 1, False), id="dcgan-4x4-s2"),
    pytest.param((2, 4, 4, 6, 6, 3, 2, 1, 1, 2, True), id="grouped-output-padding"),
    pytest.param((2, 4, 4, 4, 4, 1, 3, 0, 0, 1, True), id="stride-over-kernel"),
    pytest.param((3, 5, 1, 1, 7, 4, 1, 0, 0, 1, False), id="dcgan-first-layer"),
]


def _tolerance(dtype, scale):
    # fp32: PSUM sums in another order than oneDNN; bf16: both round once from fp32 sums.
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5 * scale}
    return {"rtol": 2**-7, "atol": 2**-7 * scale}


def _run(fn, dev, tensors, grad_out):
    leaves = [None if t is None else t.detach().to(dev).requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(grad_out.to(dev))
    return [y.detach().cpu(), *(t.grad.cpu() for t in leaves if t is not None)]


def _compare(fn, tensors, dtype):
    y = fn(*tensors)
    grad_out = torch.randn(y.shape).to(dtype)
    want = _run(fn, "cpu", tensors, grad_out)
    torch.neuron.clear_op_tracking()
    got = _run(fn, "neuron", tensors, grad_out)
    assert ran_natively(FWD) and ran_natively(BWD), torch.neuron.get_fallback_ops()
    assert not {FWD, BWD} & set(torch.neuron.get_fallback_ops())
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, **_tolerance(dtype, float(w.abs().max()) + 1))


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV2D)
def test_conv2d_forward_and_backward_match_cpu(case, dtype):
    n, ci, h, w, co, k, s, p, d, g, bias = case
    torch.manual_seed(0)
    x = torch.randn(n, ci, h, w).to(dtype)
    wt = (torch.randn(co, ci // g, *_pair(k)) / (ci * 3)).to(dtype)
    b = torch.randn(co).to(dtype) if bias else None
    _compare(lambda x, wt, b=None: F.conv2d(x, wt, b, s, p, d, g), [x, wt, b], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSED)
def test_conv_transpose2d_forward_and_backward_match_cpu(case, dtype):
    n, ci, h, w, co, k, s, p, op, g, bias = case
    torch.manual_seed(1)
    x = torch.randn(n, ci, h, w).to(dtype)
    wt = (torch.randn(ci, co // g, k, k) / ci).to(dtype)
    b = torch.randn(co).to(dtype) if bias else None
    _compare(lambda x, wt, b=None: F.conv_transpose2d(x, wt, b, s, p, op, g), [x, wt, b], dtype)


@pytest.mark.parametrize("transposed", [False, True])
def test_conv1d_matches_cpu(transposed):
    torch.manual_seed(2)
    x = torch.randn(3, 5, 17)
    if transposed:
        wt, b = torch.randn(5, 7, 3), torch.randn(7)
        fn = lambda x, wt, b: F.conv_transpose1d(x, wt, b, stride=2, padding=1)  # noqa: E731
    else:
        wt, b = torch.randn(7, 5, 3), torch.randn(7)
        fn = lambda x, wt, b: F.conv1d(x, wt, b, stride=2, padding=1, dilation=2)  # noqa: E731
    _compare(fn, [x, wt, b], torch.float32)


def test_masked_backward_and_a_frozen_input():
    """The input needs no gradient (the first layer): convolution_backward's mask skips grad_input."""
    torch.manual_seed(3)
    x, wt = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    wd = wt.to("neuron").requires_grad_()
    F.conv2d(x.to("neuron"), wd, padding=1).sum().backward()
    wc = wt.clone().requires_grad_()
    F.conv2d(x, wc, padding=1).sum().backward()
    assert ran_natively(BWD)
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-4)


def test_large_images_are_cut_into_row_blocks():
    """One 3x160x160 image needs more SBUF than a block has: output rows are blocked, halos and all."""
    torch.manual_seed(4)
    x, wt, b = torch.randn(1, 3, 160, 160), torch.randn(8, 3, 3, 3), torch.randn(8)
    got = F.conv2d(x.to("neuron"), wt.to("neuron"), b.to("neuron"), stride=1, padding=1)
    assert ran_natively(FWD)
    torch.testing.assert_close(got.cpu(), F.conv2d(x, wt, b, padding=1), rtol=1e-5, atol=1e-5)


def test_uncovered_convolutions_fall_back_and_stay_correct():
    """3-d convolutions and mixed dtypes run on the host, with ATen's result."""
    x, wt = torch.randn(1, 2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2)
    got = F.conv3d(x.to("neuron"), wt.to("neuron"))
    torch.testing.assert_close(got.cpu(), F.conv3d(x, wt))
    assert FWD in torch.neuron.get_fallback_ops()


def test_simulated_time_is_charged_and_deterministic():
    from neuronsim.device import clock

    x, wt = torch.randn(4, 16, 12, 12).to("neuron"), torch.randn(32, 16, 3, 3).to("neuron")
    times = []
    for _ in range(2):
        c = clock.clock(0)
        before = c.now_ns
        F.conv2d(x, wt, padding=1)
        times.append(c.now_ns - before)
    assert times[0] == times[1] > 0
