"""embedding_bag on the device: the forward bit-exact against ATen-CPU (sums as fbgemm's fused
multiply-add chain), every mode and option nn.EmbeddingBag passes; its auxiliary results as CPU's."""

from __future__ import annotations

import pytest
import torch

aten = torch.ops.aten


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize("case", [
    (20, 7, 30, 4, 0, False, False, -1),  # sum
    (20, 7, 30, 4, 1, False, False, -1),  # mean
    (20, 7, 30, 4, 0, True, False, -1),  # per_sample_weights: fused multiply-adds
    (50, 33, 200, 70, 1, False, True, 3),  # two bag tiles, include_last_offset, padding_idx
    (50, 16, 150, 5, 0, False, False, 2),  # sum with padding_idx: offset2bag filled
])
def test_embedding_bag_forward_matches_cpu_bit_for_bit(case):
    v, d, n, b, mode, weighted, last, pad = case
    torch.manual_seed(v + n + b)
    w, idx = torch.randn(v, d), torch.randint(0, v, (n,))
    off = torch.sort(torch.randint(0, n, (b + (1 if last else 0),))).values
    off[0] = 0
    psw = torch.randn(n) if weighted else None

    def args(dev):
        return (w.to(dev), idx.to(dev), off.to(dev), False, mode, False,
                None if psw is None else psw.to(dev), last, pad)

    want = aten._embedding_bag(*args("cpu"))
    got = aten._embedding_bag(*args("neuron"))
    assert torch.neuron.get_fallback_ops() == []
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape and torch.equal(_bits(g.cpu()), _bits(r))


@pytest.mark.parametrize("mode,weighted,pad", [("mean", False, None), ("sum", True, None), ("sum", False, 3)])
def test_embedding_bag_module_trains_on_the_device(mode, weighted, pad):
    """nn.EmbeddingBag forward and backward; the weight's gradient within fp32 rounding (ATen-CPU
    sums it in its own sorted-index order)."""
    torch.manual_seed(1)
    bag = torch.nn.EmbeddingBag(30, 8, mode=mode, padding_idx=pad)
    x, g = torch.randint(0, 30, (6, 5)), torch.randn(6, 8)
    psw = torch.randn(6, 5) if weighted else None
    want = bag(x, per_sample_weights=psw)
    want.backward(g)
    grad = bag.weight.grad.clone()
    bag.weight.grad = None
    dbag = bag.to("neuron")
    got = dbag(x.to("neuron"), per_sample_weights=None if psw is None else psw.to("neuron"))
    got.backward(g.to("neuron"))
    assert torch.equal(_bits(got.detach().cpu()), _bits(want.detach()))
    torch.testing.assert_close(dbag.weight.grad.cpu(), grad, rtol=1e-5, atol=1e-6)
    assert torch.neuron.get_fallback_ops() == []
