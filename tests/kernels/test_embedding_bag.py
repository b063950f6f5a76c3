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


def test_embedding_bag_module_trains_on_the_device():
    torch.manual_seed(1)
    bag = torch.nn.EmbeddingBag(30, 8, mode="mean")
    x = torch.randint(0, 30, (6, 5))
    want = bag(x)
    want.sum().backward()
    grad = bag.weight.grad.clone()
    bag.weight.grad = None
    dbag = bag.to("neuron")
    got = dbag(x.to("neuron"))
    got.sum().backward()
    assert torch.equal(_bits(got.detach().cpu()), _bits(want.detach()))
    torch.testing.assert_close(dbag.weight.grad.cpu(), grad, rtol=1e-5, atol=1e-6)
    assert "aten::_embedding_bag" not in torch.neuron.get_fallback_ops()
