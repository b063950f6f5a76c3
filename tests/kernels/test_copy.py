"""Copies as HBM->HBM DMA: contiguous, transposes and permutes, broadcasts and float casts."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_matches_cpu

from neuronsim.device import clock, native


def test_contiguous_of_transposes_and_permutes():
    x = torch.randn(6, 50, 70)
    d = x.to("neuron")
    assert_matches_cpu(d.transpose(1, 2).contiguous(), x.transpose(1, 2).contiguous())
    assert_matches_cpu(d.permute(2, 0, 1).contiguous(), x.permute(2, 0, 1).contiguous())
    assert_matches_cpu(d[:, ::2, 3:].clone(), x[:, ::2, 3:].clone())
    assert torch.neuron.get_fallback_ops() == []


def test_attention_head_permutes_are_a_few_large_dmas():
    """[B, T, H, D] <-> [B, H, T, D]: outer dims fold into each DMA's access pattern."""
    x = torch.randn(3, 16, 5, 16)  # a shape no other test copies: its signatures are traced here
    d = x.to("neuron")
    cache = native.entries("aten::copy_.default")
    before = set(cache)
    for got, expected in ((d.transpose(1, 2).contiguous(), x.transpose(1, 2).contiguous()),
                          (d.transpose(1, 2).contiguous().transpose(1, 2).contiguous(), x)):
        assert_matches_cpu(got, expected)
    new = [e for k, e in cache.items() if k not in before]
    assert new and not any(native.is_declined(e) for e in new)
    for entry in new:
        dmas = [i for i in entry.program.instructions if "DMA" in i.opcode.name]
        assert len(dmas) == 1  # 16 partitions x (B, H, D) = 240 elements each: one 15 KiB transfer


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                                     (torch.float32, torch.float16)])
def test_float_casts_round_as_aten(src, dst):
    x = (torch.randn(333, 77) * 100).to(src)
    assert_matches_cpu(x.to("neuron").to(dst), x.to(dst), rtol=0, atol=0)
    assert "aten::copy_" in torch.neuron.get_executed_ops()


def test_copy_into_a_view_broadcasts_and_int_float_casts_fall_back():
    d = torch.zeros(8, 16, device="neuron")
    d[2:5].copy_(torch.arange(16.0).to("neuron"))
    expected = torch.zeros(8, 16)
    expected[2:5] = torch.arange(16.0)
    assert torch.equal(d.cpu(), expected)
    ints = torch.arange(5, dtype=torch.int32, device="neuron")
    assert ints.float().cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_cat_and_stack_along_any_dim(dtype):
    xs = [torch.randn(3, n, 5).mul(10).to(dtype) for n in (4, 1, 130)]
    ds = [x.to("neuron") for x in xs]
    assert_matches_cpu(torch.cat(ds, dim=1), torch.cat(xs, dim=1))
    ys = [x[:, :1] for x in xs]
    assert_matches_cpu(torch.cat([d[:, :1] for d in ds], dim=-1), torch.cat(ys, dim=-1))
    assert_matches_cpu(torch.stack([d[:, :1] for d in ds]), torch.stack(ys))
    assert torch.neuron.get_fallback_ops() == []


def test_cat_promotes_floats_and_skips_nothing_silently():
    a, b = torch.randn(2, 3), torch.randn(4, 3).bfloat16()
    assert_matches_cpu(torch.cat([a.to("neuron"), b.to("neuron")]), torch.cat([a, b]))
    assert "aten::cat" in torch.neuron.get_executed_ops()
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([a.to("neuron"), torch.randn(2, 4).to("neuron")])


def test_empty_inputs_and_outputs_run_natively():
    """A KV cache starts as ``torch.tensor([])`` (zeroed, then concatenated with the first keys):
    cat skips the legacy 1-D empty tensor and inputs empty along ``dim``, as ATen does, and an op
    whose outputs are all empty computes nothing and charges nothing."""
    keys = torch.randn(2, 2, 5, 8)[..., ::2]  # a strided view, as the cache's keys are
    cache = torch.empty(0)
    d_cache = cache.to("neuron").zero_()
    assert_matches_cpu(torch.cat([d_cache, keys.to("neuron")], dim=-2), torch.cat([cache, keys], dim=-2))
    none = keys[:, :, :0]
    assert_matches_cpu(torch.cat([none.to("neuron"), keys.to("neuron"), keys.to("neuron")], dim=2),
                       torch.cat([none, keys, keys], dim=2))
    before = sum(len(c.events()) for c in clock.all_clocks().values())
    empty = torch.cat([d_cache, d_cache]).exp()
    assert empty.shape == (0,) and empty.device.type == "neuron"
    assert sum(len(c.events()) for c in clock.all_clocks().values()) == before
    assert torch.neuron.get_fallback_ops() == []
    assert {"aten::cat", "aten::zero_", "aten::exp"} <= set(torch.neuron.get_executed_ops())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_select_backward_is_zeros_and_the_gradient_in_its_slice(dtype):
    for shape, dim, index in [((4, 7, 5), 1, 0), ((4, 7, 5), 1, -1), ((6,), 0, 3), ((2, 3, 4, 5), 3, 1)]:
        grad = torch.randn([n for i, n in enumerate(shape) if i != dim]).to(dtype)
        want = torch.ops.aten.select_backward(grad, list(shape), dim, index)
        got = torch.ops.aten.select_backward(grad.to("neuron"), list(shape), dim, index)
        assert torch.equal(got.cpu(), want)
    x = torch.randn(4, 7, 5, requires_grad=True)  # a class token's gradient: a broadcast (stride-0) grad
    dx = x.detach().to("neuron").requires_grad_()
    x[:, 0].sum().backward()
    dx[:, 0].sum().backward()
    assert torch.equal(dx.grad.cpu(), x.grad)
    assert torch.neuron.get_fallback_ops() == []
