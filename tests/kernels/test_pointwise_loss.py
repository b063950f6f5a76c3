"""Point-wise loss kernels (kernels/pointwise_loss.py): BCE, BCE-with-logits (through log_sigmoid),
MSE, L1 (a composite of native ops), smooth L1 and Huber, every reduction, forward and backward,
against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.pointwise_loss  # noqa: F401  (registers the real kernels before the manifest lists them)

REDUCTIONS = ("mean", "sum", "none")


def _tolerance(dtype):
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 2**-6, "atol": 2**-6}


def _compare(fn, tensors, dtype, ops):
    """Loss and input gradients of ``fn`` on the device vs CPU; ``ops`` ran natively, none fell back."""
    def run(dev):
        leaves = [t.detach().to(dev).requires_grad_() for t in tensors]
        y = fn(*leaves)
        y.backward(torch.ones_like(y) if y.dim() == 0 else torch.linspace(-1, 1, y.numel()).view(y.shape)
                   .to(dtype).to(dev))
        return [y.detach().cpu(), *(t.grad.cpu() for t in leaves)]

    want = run("cpu")
    torch.neuron.clear_op_tracking()
    got = run("neuron")
    assert all(ran_natively(op) for op in ops), torch.neuron.get_executed_ops()
    assert not torch.neuron.get_fallback_ops(), torch.neuron.get_fallback_ops()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **_tolerance(dtype))


def _inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g).to(dtype), torch.rand(shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction, dtype):
    p, t = _inputs((3, 7, 11), dtype)
    p[0, 0, :2] = torch.tensor([0.0, 1.0])  # the log clamp at -100
    w = torch.rand(7, 11).to(dtype)

    def fn(p):
        return F.binary_cross_entropy(p, t.to(p.device), w.to(p.device), reduction=reduction)

    _compare(fn, [p], dtype, ["aten::binary_cross_entropy", "aten::binary_cross_entropy_backward"])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits(reduction):
    x, t = _inputs((130, 9), torch.float32, seed=1)

    def fn(x):
        return F.binary_cross_entropy_with_logits(x * 8 - 4, t.to(x.device), reduction=reduction)

    _compare(fn, [x], torch.float32, ["aten::log_sigmoid_forward"])  # backward: sigmoid, sub, mul


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_smooth_l1_huber_and_l1(reduction, dtype):
    x, t = _inputs((5, 300), dtype, seed=2)
    cases = [
        (lambda x, t: F.mse_loss(x, t, reduction=reduction), "aten::mse_loss"),
        (lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=0.3), "aten::smooth_l1_loss"),
        (lambda x, t: F.huber_loss(x, t, reduction=reduction, delta=0.3), "aten::huber_loss"),
        (lambda x, t: F.l1_loss(x, t, reduction=reduction), None),
    ]
    for fn, op in cases:
        _compare(fn, [x, t], dtype, [op, op + "_backward"] if op else [])


def test_bce_outside_the_unit_interval_raises_atens_error():
    p, t = torch.tensor([0.5, 1.5]).to("neuron"), torch.tensor([0.0, 1.0]).to("neuron")
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(p, t)
