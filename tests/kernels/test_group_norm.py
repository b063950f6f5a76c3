"""Group normalization kernels (kernels/group_norm.py): native_group_norm and its backward against
ATen-CPU, with and without the affine parameters, one group to one group per channel, rows of one
chunk (kept in SBUF) and of several (loaded twice), more rows than partitions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.group_norm  # noqa: F401  (registers the real kernels before the manifest lists them)

FWD, BWD = "aten::native_group_norm", "aten::native_group_norm_backward"


def _tolerance(dtype):
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-4}
    return {"rtol": 2**-6, "atol": 2**-5}


def _run(fn, dev, tensors, grad_out):
    leaves = [t.detach().to(dev).requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(grad_out.to(dev))
    return [y.detach().cpu(), *(t.grad.cpu() for t in leaves)]


def _compare(fn, tensors, dtype):
    y = fn(*tensors)
    grad_out = torch.randn(y.shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    want = _run(fn, "cpu", tensors, grad_out)
    torch.neuron.clear_op_tracking()
    got = _run(fn, "neuron", tensors, grad_out)
    assert ran_natively(FWD) and ran_natively(BWD), torch.neuron.get_fallback_ops()
    assert not torch.neuron.get_fallback_ops()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **_tolerance(dtype))


CASES = [  # (shape, groups)
    pytest.param((4, 6, 7, 9), 3, id="odd-spatial"),
    pytest.param((2, 6, 5, 5), 6, id="group-per-channel"),
    pytest.param((3, 4, 9), 1, id="one-group-1d"),
    pytest.param((50, 64), 8, id="rows-over-128"),
    pytest.param((2, 4, 70, 70), 2, id="rows-of-several-chunks"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "groups"), CASES)
def test_group_norm_forward_and_backward_match_cpu(shape, groups, dtype):
    torch.manual_seed(0)
    c = shape[1]
    x = (torch.randn(shape) * 2 + 0.3).to(dtype)
    w, b = torch.randn(c).to(dtype), torch.randn(c).to(dtype)
    _compare(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-5), [x, w, b], dtype)


def test_without_affine_parameters():
    torch.manual_seed(1)
    _compare(lambda x: F.group_norm(x, 2), [torch.randn(3, 4, 6, 5)], torch.float32)


def test_groupnorm_module_in_a_small_network():
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU())
    x = torch.randn(2, 3, 9, 9)
    want = net(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net.to("neuron")
    got = net(x.to("neuron"))
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    for p, g in zip(net.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-4, atol=1e-3)
