"""TorchNeuron's 64-bit policy: float64/int64 compute in 32 bits and are cast back; a switch turns it off."""

from __future__ import annotations

import pytest
import torch

import neuronsim
from neuronsim import env
from neuronsim.options import from_environment

TINY = 1e-10  # lost next to 1.0 in float32, kept in float64


def test_float64_ops_compute_in_float32_and_keep_their_dtype():
    x = torch.tensor([1.0], dtype=torch.float64, device="neuron")
    y = x + TINY
    assert y.dtype == torch.float64
    assert y.item() == 1.0
    assert (x.cpu() + TINY).item() != 1.0
    z = torch.tensor([1.0 / 3], dtype=torch.float64, device="neuron") * 1.0
    assert z.item() == float(torch.tensor(1.0 / 3, dtype=torch.float32))


def test_int64_ops_compute_in_int32():
    x = torch.tensor([2**31 - 1], device="neuron")
    assert x.dtype == torch.int64
    assert (x + 1).dtype == torch.int64
    assert (x + 1).item() == -(2**31)


def test_switch_turns_the_policy_off():
    x = torch.tensor([1.0], dtype=torch.float64, device="neuron")
    with neuronsim.options(cast_64bit=False):
        assert (x + TINY).item() == 1.0 + TINY
        assert (torch.tensor([2**31 - 1], device="neuron") + 1).item() == 2**31
    assert from_environment({env.NEURON_SIM_CAST_64BIT: "0"}).cast_64bit is False
    assert from_environment({env.NEURON_SIM_CAST_64BIT: "1"}).cast_64bit is True
    with pytest.raises(ValueError):
        from_environment({env.NEURON_SIM_CAST_64BIT: "maybe"})


def test_copies_are_exact():
    values = torch.tensor([1.0 + TINY, 2**40 + 0.5], dtype=torch.float64)
    on_device = values.to("neuron")
    assert torch.equal(on_device.cpu(), values)
    assert torch.equal(on_device.clone().cpu(), values)
    big = torch.tensor([2**40], dtype=torch.int64)
    assert big.to("neuron").cpu().item() == 2**40


def test_in_place_and_out_on_64bit_tensors():
    x = torch.ones(3, dtype=torch.float64, device="neuron")
    x.add_(TINY)
    assert x.dtype == torch.float64 and x.cpu().tolist() == [1.0, 1.0, 1.0]
    out = torch.empty(3, dtype=torch.float64, device="neuron")
    torch.add(x, TINY, out=out)
    assert out.cpu().tolist() == [1.0, 1.0, 1.0]
    grown = torch.empty(0, dtype=torch.int64, device="neuron")
    torch.add(torch.tensor([2**31 - 1, 1], device="neuron"), 1, out=grown)
    assert grown.cpu().tolist() == [-(2**31), 2]


def test_explicit_dtypes_are_honoured():
    x = torch.ones(3, dtype=torch.float64, device="neuron")
    assert x.sum(dtype=torch.float32).dtype == torch.float32
    assert x.sum().dtype == torch.float64
    assert torch.ones(3, device="neuron").sum(dtype=torch.float64).dtype == torch.float64
    assert torch.arange(4, dtype=torch.float64, device="neuron").dtype == torch.float64
    assert torch.argmax(x).dtype == torch.int64


def test_int64_indices_work_with_ops_that_insist_on_them():
    src = torch.arange(6.0, device="neuron").view(2, 3)
    index = torch.tensor([[0], [2]], device="neuron")
    assert torch.gather(src, 1, index).cpu().tolist() == [[0.0], [5.0]]
    assert torch.zeros(2, 3, device="neuron").scatter_(1, index, 1.0).sum().item() == 2
    logits = torch.randn(3, 5, device="neuron")
    target = torch.tensor([1, 2, 3], device="neuron")
    expected = torch.nn.functional.cross_entropy(logits.cpu(), target.cpu())
    torch.testing.assert_close(torch.nn.functional.cross_entropy(logits, target).cpu(), expected)


def test_random_float64_draws_keep_their_dtype():
    torch.manual_seed(0)
    r = torch.randn(4, dtype=torch.float64, device="neuron")
    assert r.dtype == torch.float64
    assert torch.equal(r.cpu(), r.cpu().float().double())


def test_a_0_dim_float64_operand_does_not_widen_a_float32_result():
    """Type promotion: 0-dim tensors do not raise a dimensioned operand's dtype (pinv's rtol)."""
    a = torch.randn(5, 5)
    assert torch.linalg.pinv(a.to("neuron"), rtol=1.0).dtype == torch.linalg.pinv(a, rtol=1.0).dtype
    f, s = torch.randn(4), torch.tensor(2.0, dtype=torch.float64)
    assert (f.to("neuron") * s.to("neuron")).dtype == (f * s).dtype == torch.float32
    assert (s.to("neuron") * s.to("neuron")).dtype == torch.float64


def test_int64_indices_do_not_widen_an_int32_result():
    """scatter/gather/index_add of int32 data with int64 indices stay int32 (ATen's meta rule)."""
    x, i = torch.randint(0, 9, (4, 5), dtype=torch.int32), torch.randint(0, 4, (2, 5))
    assert torch.scatter(x.to("neuron"), 0, i.to("neuron"), 7).dtype == torch.int32
    assert torch.gather(x.to("neuron"), 0, i.to("neuron")).dtype == torch.int32
    mixed = torch.arange(4).to("neuron") + torch.arange(4, dtype=torch.int32).to("neuron")
    assert mixed.dtype == torch.int64


def test_histc_counts_integer_router_choices_as_cuda_does():
    """Mixtral-style routing: tokens per expert from the top-k expert indices (int64). CUDA's histc
    takes integers (ATen-CPU's does not): the counts are the float64 histogram, in int64."""
    torch.manual_seed(0)
    num_experts = 8
    logits = torch.randn(37, num_experts)
    chosen = torch.topk(logits, 2, dim=-1).indices  # int64
    want = torch.histc(chosen.double(), bins=num_experts, min=0, max=num_experts - 1).long()
    got = torch.histc(chosen.to("neuron"), bins=num_experts, min=0, max=num_experts - 1)
    assert got.dtype == torch.int64 and got.device.type == "neuron"
    assert torch.equal(got.cpu(), want) and got.sum().item() == chosen.numel()
    big = torch.tensor([2**30 + 1, 2**30 + 2, 2**30 + 2], dtype=torch.int64)  # float32 rounds them alike
    counts = torch.histc(big.to("neuron"), bins=8, min=2**30, max=2**30 + 8).cpu().tolist()
    assert counts == [0, 1, 2, 0, 0, 0, 0, 0]
    small = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    assert torch.histc(small.to("neuron"), bins=4, min=0, max=7).cpu().tolist() == [1, 2, 0, 1]


def test_ops_without_a_32_bit_host_kernel_compute_in_64_bits():
    """ATen-CPU has avg_pool2d for int64 but not int32: the policy keeps that op's int64 inputs."""
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.int64).reshape(2, 3, 8, 8) * 3
    got = torch.nn.functional.avg_pool2d(x.to("neuron"), 2)
    assert got.dtype == torch.int64
    assert torch.equal(got.cpu(), torch.nn.functional.avg_pool2d(x, 2))
