"""Softmax and log-softmax (forward, backward, autograd) on the device against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively

import neuronsim.kernels.softmax  # noqa: F401  (registers the real kernels)
from neuronsim.device import native

FUNCS = {"aten::_softmax": torch.softmax, "aten::_log_softmax": torch.log_softmax}
SHAPES = [
    ((300, 70), -1),  # > 128 rows: three row tiles
    ((5, 5000), -1),  # a row longer than 2048, resident in SBUF
    ((3, 30000), -1),  # a row past the SBUF budget: streamed in chunks
    ((2, 6, 40), 1),  # a middle dim: strided access patterns
    ((40, 3), 0),
    ((17,), 0),
]


def _masked(shape, dtype):
    x = torch.randn(shape).to(dtype)
    if x.dim() >= 2:
        x[0, : x.shape[1] // 2] = float("-inf")  # attention-style partially masked row
        x[1] = float("-inf")  # a fully masked row: NaN, as ATen
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, dim", SHAPES)
@pytest.mark.parametrize("name", FUNCS)
def test_forward_matches_cpu_with_masked_rows(name, shape, dim, dtype):
    torch.manual_seed(0)
    x = _masked(shape, dtype)
    f = FUNCS[name]
    got = f(x.to("neuron"), dim)
    assert ran_natively(name)
    ref = f(x, dim)
    tol = {} if dtype == torch.float32 else {"rtol": 2**-6, "atol": 2**-7}
    assert_matches_cpu(got, ref, equal_nan=True, **tol)
    assert torch.equal(got.cpu().isnan(), ref.isnan()) and torch.equal(got.cpu().isinf(), ref.isinf())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, dim", [((300, 70), -1), ((3, 30000), -1), ((2, 6, 40), 1)])
@pytest.mark.parametrize("name", FUNCS)
def test_backward_through_autograd(name, shape, dim, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape).to(dtype)
    x[0, :3] = float("-inf")  # masked entries: zero gradient
    g = torch.randn(shape).to(dtype)
    f = FUNCS[name]
    dx = x.to("neuron").requires_grad_()
    f(dx, dim).backward(g.to("neuron"))
    assert ran_natively(name) and ran_natively(f"{name}_backward_data")
    cx = x.clone().requires_grad_()
    f(cx, dim).backward(g)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2**-6, "atol": 2**-6}
    assert_matches_cpu(dx.grad, cx.grad, **tol)
    assert torch.neuron.get_fallback_ops() == []


def test_masked_attention_softmax_like_train_gpt():
    torch.manual_seed(2)
    T = 48
    att = torch.randn(2, 3, T, T)
    mask = torch.tril(torch.ones(T, T)) == 0
    ref = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    got = torch.softmax(att.to("neuron").masked_fill(mask.to("neuron"), float("-inf")), dim=-1)
    assert ran_natively("aten::_softmax")
    assert_matches_cpu(got, ref)


def test_streamed_rows_load_three_times_resident_once():
    """A resident row is loaded once; a streamed row once per pass (max, sum, normalize)."""
    for n, loads_per_row in ((1000, 1), (30000, 3 * 8)):  # 30000 columns: 8 chunks of 4096
        x = torch.randn(4, n).to("neuron")
        torch.softmax(x, -1)
        entry = next(e for k, e in native.entries("aten::_softmax.default").items()
                     if not native.is_declined(e) and (torch.float32, torch.Size([4, n]), (n, 1)) in k[2])
        loads = [i for i in entry.program.instructions
                 if "DMA" in i.opcode.name and i.dst.memory.name == "SBUF"]
        assert len(loads) == loads_per_row


def test_half_to_float_falls_back_and_raises_the_hosts_error():
    """ATen-CPU has no half-to-float softmax; the device reports the same error and stays usable."""
    x = torch.randn(8, 16).half()
    with pytest.raises(RuntimeError, match="half to float"):
        torch._softmax(x, -1, True)
    on_device = x.to("neuron")
    with pytest.raises(RuntimeError, match="half to float"):
        torch._softmax(on_device, -1, True)
    assert not ran_natively("aten::_softmax")
    assert torch.equal(on_device.cpu(), x)
