"""An exception raised in a hook during a neuron backward reaches the caller; the process lives."""

from __future__ import annotations

import pytest
import torch


def _leaf():
    return torch.randn(4, device="neuron", requires_grad=True)


def test_tensor_hook_exception_propagates():
    w = _leaf()
    w.register_hook(lambda g: (_ for _ in ()).throw(ValueError("tensor hook")))
    with pytest.raises(ValueError, match="tensor hook"):
        (w * 2).sum().backward()
    with pytest.raises(ValueError, match="tensor hook"):
        torch.autograd.grad((w * 2).sum(), w)


def test_post_accumulate_grad_hook_exception_propagates():
    w = _leaf()
    w.register_post_accumulate_grad_hook(lambda p: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        (w * 2).sum().backward()


def test_module_full_backward_hook_exception_propagates():
    model = torch.nn.Linear(4, 2).to("neuron")
    model.register_full_backward_hook(lambda module, grad_in, grad_out: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        model(torch.randn(3, 4, device="neuron", requires_grad=True)).sum().backward()


def test_working_hooks_still_work():
    w = _leaf()
    w.register_hook(lambda g: g * 3)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.cpu()))
    (w * 2).sum().backward()
    assert w.grad.cpu().tolist() == [6.0] * 4 and len(seen) == 1


def test_backward_errors_in_kernels_propagate():
    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad @ torch.ones(3, 3, device=grad.device)

    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        Bad.apply(_leaf()).sum().backward()
