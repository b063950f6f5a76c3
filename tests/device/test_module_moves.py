"""Moving modules keeps their Parameter objects, as on CUDA: ties and optimizers survive.

"As on CUDA" is checked against a conversion CPU tensors take the same branches for: c10 lets a
CPU tensor take a float64 CPU tensor's data in place exactly as it lets a CPU tensor take a CUDA
tensor's, so ``.to(torch.float64)`` is the reference outcome for every setting of
``torch.__future__`` that ``nn.Module._apply`` reads.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


class TiedLM(nn.Module):
    """nanoGPT's weight tying: the output head shares the token embedding's weight."""

    def __init__(self, vocab: int = 11, dim: int = 8):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, idx, targets):
        logits = self.head(self.norm(self.tok(idx)) * self.scale)
        return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _batch(device, vocab=11):
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, vocab, (4, 6), generator=g)
    return idx.to(device), torch.roll(idx, -1, dims=1).to(device)


@pytest.fixture(params=[(False, False), (True, False), (False, True)],
                ids=["set_data", "overwrite", "swap_tensors"])
def conversion(request):
    overwrite, swap = request.param
    saved = (torch.__future__.get_overwrite_module_params_on_conversion(),
             torch.__future__.get_swap_module_params_on_conversion())
    torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
    torch.__future__.set_swap_module_params_on_conversion(swap)
    yield request.param
    torch.__future__.set_overwrite_module_params_on_conversion(saved[0])
    torch.__future__.set_swap_module_params_on_conversion(saved[1])


def _outcome(move):
    """What a move keeps: parameter and grad objects, sharing, buffer objects."""
    torch.manual_seed(0)
    model = TiedLM()
    model.norm.weight.grad = torch.ones_like(model.norm.weight)
    params = dict(model.named_parameters(remove_duplicate=False))
    grad = model.norm.weight.grad
    buffer = model.scale
    moved = move(model)
    after = dict(moved.named_parameters(remove_duplicate=False))
    return {
        "same params": {name: after[name] is p for name, p in params.items()},
        "unique params": len(list(moved.parameters())),
        "tied": moved.head.weight is moved.tok.weight,
        "same grad": moved.norm.weight.grad is grad,
        "same buffer": moved.scale is buffer,
    }


def test_the_compatibility_rule_is_c10s_with_neuron_dense():
    cpu, neuron = torch.ones(2), torch.ones(2, device="neuron")
    assert torch._has_compatible_shallow_copy_type(cpu, neuron)
    assert torch._has_compatible_shallow_copy_type(neuron, cpu)
    assert torch._has_compatible_shallow_copy_type(neuron, neuron.double())
    assert torch._has_compatible_shallow_copy_type(neuron, torch.ones(2, device="neuron:1"))
    assert not torch._has_compatible_shallow_copy_type(neuron, torch.ones(2, device="meta"))
    assert not torch._has_compatible_shallow_copy_type(torch.ones(2).to_sparse(), neuron)


@pytest.mark.parametrize("move", [
    lambda m: m.to("neuron"),
    lambda m: m.neuron(),
    lambda m: m.to("neuron:1"),
    lambda m: m.to("neuron").cpu().to("neuron"),
    lambda m: m.to(device="neuron", dtype=torch.bfloat16),
], ids=["to", "neuron()", "to_index_1", "round_trip", "to_bf16"])
def test_module_moves_keep_what_a_dense_conversion_keeps(conversion, move):
    reference = _outcome(lambda m: m.to(torch.float64))
    assert _outcome(move) == reference
    if conversion != (True, False):  # torch overwrites parameters when asked to, on CUDA too
        assert reference["tied"] and reference["unique params"] == 3
        assert all(reference["same params"].values())


def test_issue_repro_optimizer_made_before_the_move_updates_the_model():
    layer = nn.Linear(4, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=1)
    weight = layer.weight
    layer.to("neuron")
    assert layer.weight is weight and weight.device == torch.device("neuron", 0)
    before = layer.weight.detach().cpu().clone()
    layer(torch.ones(1, 4, device="neuron")).sum().backward()
    opt.step()
    assert layer.weight.grad.device.type == "neuron"
    torch.testing.assert_close(layer.weight.detach().cpu(), before - 1)


def test_tied_model_trains_like_cpu(conversion):
    torch.manual_seed(0)
    reference = TiedLM()
    model = copy.deepcopy(reference)
    models, optimizers = {}, {}
    for device, m in (("cpu", reference), ("neuron", model)):
        optimizers[device] = torch.optim.AdamW(m.parameters(), lr=1e-2)  # made before the move
        models[device] = m.to(device)
    if conversion != (True, False):
        assert len(list(model.parameters())) == len(list(reference.parameters())) == 3
    for _ in range(4):
        losses, grads = {}, {}
        for device, m in models.items():
            optimizers[device].zero_grad()
            loss = m(*_batch(device))
            loss.backward()
            optimizers[device].step()
            losses[device] = loss.item()
            grads[device] = {n: p.grad.detach().cpu() for n, p in m.named_parameters()}
        assert losses["neuron"] == pytest.approx(losses["cpu"], rel=1e-5)
        if conversion == (True, False):
            continue  # the optimizer holds the replaced parameters on both devices: no update
        for name, g in grads["cpu"].items():
            torch.testing.assert_close(grads["neuron"][name], g, rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-6, msg=name)


def test_set_data_across_devices_keeps_autograd_state():
    p = nn.Parameter(torch.ones(3))
    (p * 2).sum().backward()  # makes p's gradient accumulator, for the cpu
    p.data = torch.full((3,), 2.0, device="neuron")
    assert p.device == torch.device("neuron", 0) and p.requires_grad and p.is_leaf
    p.grad = None
    (p * 3).sum().backward()  # a fresh accumulator: the old one expected cpu gradients
    assert p.grad.device.type == "neuron"
    torch.testing.assert_close(p.grad.cpu(), torch.full((3,), 3.0))
    p.data = p.data.cpu()
    assert p.device.type == "cpu"
    with pytest.raises(RuntimeError, match="floating point"):
        p.data = torch.ones(3, dtype=torch.int64, device="neuron")
    assert p.device.type == "cpu"  # refused before anything moved


def test_load_state_dict_keeps_parameters(conversion):
    torch.manual_seed(0)
    source = TiedLM()
    model = TiedLM().to("neuron")
    tok = model.tok.weight
    missing = model.load_state_dict(source.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys
    assert model.tok.weight.device.type == "neuron"
    torch.testing.assert_close(model.tok.weight.detach().cpu(), source.tok.weight.detach())
    if conversion == (False, False):
        assert model.tok.weight is tok and model.head.weight is tok


def test_load_state_dict_assign_matches_the_dense_reference():
    def load(device, dtype):
        torch.manual_seed(0)
        model = TiedLM().to(device=device, dtype=dtype)
        weight = model.tok.weight
        model.load_state_dict(TiedLM().to(device=device, dtype=dtype).state_dict(), assign=True)
        return model.tok.weight is weight, model.tok.weight.device.type

    assert load("neuron", torch.float32)[0] == load("cpu", torch.float64)[0]
    assert load("neuron", torch.float32)[1] == "neuron"
