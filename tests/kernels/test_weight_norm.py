"""_weight_norm_interface and its backward against ATen-CPU (within fp32 rounding of the sums)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("shape,dim", [((32, 16, 16), 2), ((300, 40), 0)])
def test_weight_norm_forward_and_backward(shape, dim):
    """wav2vec2's positional conv (dim 2 of a conv weight) and a Linear's default (dim 0)."""
    torch.manual_seed(2)
    v0 = torch.randn(shape)
    gshape = [1] * len(shape)
    gshape[dim] = shape[dim]
    g0 = torch.randn(gshape)

    def run(device):
        v, g = v0.clone().to(device).requires_grad_(), g0.clone().to(device).requires_grad_()
        w = torch._weight_norm(v, g, dim)
        w.backward(torch.linspace(-1, 1, w.numel()).view(w.shape).to(device))
        return w, v.grad, g.grad

    want = run("cpu")
    got = run("neuron")
    ops = torch.neuron.get_executed_ops()
    assert "aten::_weight_norm_interface" in ops and "aten::_weight_norm_interface_backward" in ops
    assert not {"aten::_weight_norm_interface", "aten::_weight_norm_interface_backward"} & set(
        torch.neuron.get_fallback_ops())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), rtol=2e-5, atol=2e-6)
