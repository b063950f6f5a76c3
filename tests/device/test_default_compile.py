"""``torch.compile(fn)`` without a backend picks the neuron backend for graphs on the device, as on
TorchNeuron; graphs of CPU tensors still go to Inductor."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn


class Block(nn.Module):
    """A pre-norm transformer block with causal self-attention (nanoGPT's shape)."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_default_compile_of_a_model_on_the_device_matches_eager():
    torch.manual_seed(0)
    eager = Block().to("neuron")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model)
    x = torch.randn(2, 8, 16, device="neuron")
    torch.neuron.reset_dynamo_metrics()
    want, got = eager(x), compiled(x)
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-5)
    want.square().mean().backward()
    got.square().mean().backward()
    for (name, p), q in zip(compiled_model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-6, msg=name)
    kinds = {m["graph_name"].rsplit("_", 2)[-2] for m in torch.neuron.get_dynamo_metrics()}
    assert kinds == {"fwd", "bwd"}  # compiled by the neuron backend


def test_other_modes_warn_and_run_as_default():
    layer = nn.Linear(4, 4).to("neuron")
    x = torch.randn(3, 4, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(layer, mode="reduce-overhead")(x)
    assert any("mode='reduce-overhead' is not supported" in str(w.message) for w in caught)
    torch.testing.assert_close(got.cpu(), layer(x).cpu())


def test_dynamic_true_is_rejected():
    with pytest.raises(Exception, match="requires static shapes"):
        torch.compile(lambda a: a * 2, dynamic=True)(torch.ones(5, device="neuron"))


def test_graphs_of_cpu_tensors_still_compile_with_inductor():
    torch.neuron.reset_dynamo_metrics()
    fn = torch.compile(lambda a: a.sin() + 1)
    x = torch.randn(6)
    torch.testing.assert_close(fn(x), x.sin() + 1)
    assert torch.neuron.get_dynamo_metrics() == []
