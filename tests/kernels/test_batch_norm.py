"""Batch normalization kernels (kernels/batch_norm.py): native_batch_norm in training and eval (the
running statistics updated in place) and native_batch_norm_backward, against ATen-CPU; instance norm,
which ATen's composite runs as a batch norm over ``[1, N*C, ...]``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.batch_norm  # noqa: F401  (registers the real kernels before the manifest lists them)

FWD, BWD = "aten::native_batch_norm", "aten::native_batch_norm_backward"


def _tolerance(dtype):
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-4}
    return {"rtol": 2**-6, "atol": 2**-5}  # 16-bit: ATen-CPU rounds intermediates ours keep in fp32


def _run(fn, dev, tensors, grad_out):
    leaves = [t.detach().to(dev).requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(grad_out.to(dev))
    return [y.detach().cpu(), *(t.grad.cpu() for t in leaves)]


def _compare(fn, tensors, dtype):
    g = torch.Generator().manual_seed(7)
    y = fn(*tensors)
    grad_out = torch.randn(y.shape, generator=g).to(dtype)
    want = _run(fn, "cpu", tensors, grad_out)
    torch.neuron.clear_op_tracking()
    got = _run(fn, "neuron", tensors, grad_out)
    assert ran_natively(FWD) and ran_natively(BWD), torch.neuron.get_fallback_ops()
    assert not {FWD, BWD} & set(torch.neuron.get_fallback_ops())
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **_tolerance(dtype))


SHAPES = [
    pytest.param((4, 5, 7, 9), id="2d-odd"),
    pytest.param((33, 130), id="1d-channels-over-128"),
    pytest.param((2, 3, 70, 70), id="2d-blocks-of-one-image"),
    pytest.param((3, 6, 11), id="1d-sequence"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_training_forward_backward_and_running_statistics(shape, dtype):
    torch.manual_seed(0)
    c = shape[1]
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    w, b = torch.randn(c).to(dtype), torch.randn(c).to(dtype)
    stats = {}

    def fn(x, w, b):
        dev = x.device.type
        rm = torch.linspace(-1, 1, c, dtype=dtype, device=x.device)
        rv = torch.linspace(0.5, 2, c, dtype=dtype, device=x.device)
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2, eps=1e-3)
        stats[dev] = (rm.cpu(), rv.cpu())
        return y

    _compare(fn, [x, w, b], dtype)
    for got, want in zip(stats["neuron"], stats["cpu"], strict=True):
        torch.testing.assert_close(got, want, **_tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eval_uses_the_running_statistics(dtype):
    torch.manual_seed(1)
    x, w, b = torch.randn(3, 6, 5, 4).to(dtype), torch.randn(6).to(dtype), torch.randn(6).to(dtype)
    rm, rv = torch.randn(6).to(dtype), (torch.rand(6) + 0.5).to(dtype)

    def fn(x, w, b):
        return F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False, eps=1e-5)

    _compare(fn, [x, w, b], dtype)


def test_no_affine_and_no_running_statistics():
    torch.manual_seed(2)
    _compare(lambda x: F.batch_norm(x, None, None, training=True), [torch.randn(5, 4, 3, 3)], torch.float32)


def test_instance_norm_is_a_batch_norm_over_images_times_channels():
    torch.manual_seed(3)
    x, w, b = torch.randn(3, 4, 6, 5), torch.randn(4), torch.randn(4)
    _compare(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), [x, w, b], torch.float32)


def test_mixed_precision_parameters_and_channels_last_input():
    """A bf16 input with fp32 parameters (autocast's BatchNorm), and an NHWC-strided input (the
    spatial dims do not merge: the host computes it)."""
    torch.manual_seed(4)
    x = torch.randn(2, 3, 4, 5).to(torch.bfloat16)
    w, b = torch.randn(3), torch.randn(3)
    got = F.batch_norm(x.to("neuron"), None, None, w.to("neuron"), b.to("neuron"), training=True)
    torch.testing.assert_close(got.cpu(), F.batch_norm(x, None, None, w, b, training=True),
                               **_tolerance(torch.bfloat16))
    assert ran_natively(FWD)
    nhwc = x.float().to(memory_format=torch.channels_last)
    got = F.batch_norm(nhwc.to("neuron"), None, None, training=True)
    torch.testing.assert_close(got.cpu(), F.batch_norm(nhwc, None, None, training=True), rtol=1e-4, atol=1e-4)


def test_batchnorm_module_train_then_eval():
    torch.manual_seed(5)
    cpu = torch.nn.BatchNorm2d(6)
    dev = torch.nn.BatchNorm2d(6).to("neuron")
    x = torch.randn(4, 6, 5, 5)
    for _ in range(3):
        cpu(x)
        dev(x.to("neuron"))
    cpu.eval()
    dev.eval()
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, rtol=1e-5, atol=1e-6)
    assert int(dev.num_batches_tracked) == 3
    torch.testing.assert_close(dev(x.to("neuron")).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
