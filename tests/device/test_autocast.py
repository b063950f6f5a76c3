"""torch.autocast("neuron"): CUDA's op lists (lower precision, fp32, fp32 with dtype, promote)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

LOW = (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("low", LOW)
def test_op_dtypes_follow_the_cuda_lists(low):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4).to("neuron")
    x = torch.randn(3, 8, device="neuron")
    with torch.autocast("neuron", dtype=low):
        y = lin(x)
        assert y.dtype == low  # linear: lower precision
        assert (x @ x.t()).dtype == low and torch.bmm(x[None], x.t()[None]).dtype == low
        assert torch.softmax(y, -1).dtype == torch.float32  # softmax: fp32 (dtype set)
        assert y.sum().dtype == torch.float32
        assert torch.sum(y, dtype=torch.float16).dtype == torch.float16  # an explicit dtype stays
        assert F.layer_norm(y, (4,)).dtype == torch.float32  # layer_norm: fp32
        assert y.exp().dtype == torch.float32
        assert (y + x[:, :4]).dtype == torch.float32  # not listed: ordinary promotion
        assert y.relu().dtype == low  # not listed: runs in its input dtype
        assert torch.addcmul(x, y.repeat(1, 2), x).dtype == torch.float32  # promote: widest
        loss = F.cross_entropy(y, torch.tensor([0, 1, 2], device="neuron"))
        assert loss.dtype == torch.float32
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32  # master weights and their grads stay fp32


def test_values_are_the_cast_computation():
    torch.manual_seed(1)
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        got = a.to("neuron") @ b.to("neuron")
    expected = a.bfloat16() @ b.bfloat16()
    torch.testing.assert_close(got.cpu(), expected, rtol=2**-7, atol=2**-7)


def test_disabled_nested_and_decorator():
    x = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        with torch.autocast("neuron", enabled=False):
            assert (x @ x).dtype == torch.float32
        assert (x @ x).dtype == torch.bfloat16

    @torch.autocast("neuron", dtype=torch.float16)
    def f(t):
        return t @ t

    assert f(x).dtype == torch.float16
    assert (x @ x).dtype == torch.float32


def test_cpu_tensors_and_float64_are_not_cast():
    x = torch.randn(4, 4, device="neuron", dtype=torch.float64)
    c = torch.randn(4, 4)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.float64
        assert (c @ c).dtype == torch.float32


def test_unsupported_dtype_warns_and_disables():
    x = torch.randn(4, 4, device="neuron")
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("neuron", dtype=torch.int8):
            assert (x @ x).dtype == torch.float32


def test_binary_cross_entropy_is_banned():
    p = torch.rand(4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="with_logits"):
        F.binary_cross_entropy(p, p)


def test_grad_scaler_fp16_training_step():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("neuron", init_scale=2.0**10)
    x, y = torch.randn(32, 8, device="neuron"), torch.randn(32, 1, device="neuron")
    losses = []
    for _ in range(5):
        with torch.autocast("neuron", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        assert loss.dtype == torch.float32
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert scaler.get_scale() == 2.0**10  # no overflow, no growth within 5 steps
    assert losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())
