"""Every torch.optim optimizer (for-loop, foreach and fused variants) gives the CPU's parameters."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

OPTIMIZERS = {
    "SGD": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    "Adam": (torch.optim.Adam, {"lr": 0.01, "amsgrad": True}),
    "AdamW": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    "Adagrad": (torch.optim.Adagrad, {"lr": 0.1}),
    "Adadelta": (torch.optim.Adadelta, {"lr": 1.0}),
    "Adamax": (torch.optim.Adamax, {"lr": 0.01}),
    "ASGD": (torch.optim.ASGD, {"lr": 0.01}),
    "NAdam": (torch.optim.NAdam, {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1}),
    "RAdam": (torch.optim.RAdam, {"lr": 0.01}),
    "RMSprop": (torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.5, "centered": True}),
    "Rprop": (torch.optim.Rprop, {"lr": 0.01}),
    "Adafactor": (torch.optim.Adafactor, {"lr": 0.01}),
}
FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}
CASES = [(name, "for-loop") for name in OPTIMIZERS]
CASES += [(name, "foreach") for name in OPTIMIZERS]
CASES += [(name, "fused") for name in sorted(FUSED)]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def batches():
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 6, generator=gen), torch.randn(5, 3, generator=gen)) for _ in range(3)]


def train(model: nn.Module, make_optimizer, device: str, closure_style: bool = False) -> list[torch.Tensor]:
    model = copy.deepcopy(model).to(device)
    optimizer = make_optimizer(model.parameters())
    for x, y in batches():
        x, y = x.to(device), y.to(device)

        def closure(x=x, y=y):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        if closure_style:
            optimizer.step(closure)
        else:
            closure()
            optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def assert_same(neuron: list[torch.Tensor], cpu: list[torch.Tensor], rtol: float = 1e-5) -> None:
    for n, c in zip(neuron, cpu, strict=True):
        torch.testing.assert_close(n, c, rtol=rtol, atol=rtol / 10)


@pytest.mark.parametrize(("name", "variant"), CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_optimizer_matches_cpu(name, variant):
    cls, kwargs = OPTIMIZERS[name]
    flags = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[variant]
    model = make_model()

    def make(params):
        return cls(params, **kwargs, **flags)

    assert_same(train(model, make, "neuron"), train(model, make, "cpu"))


def test_lbfgs_matches_cpu():
    model = make_model()

    def make(params):
        return torch.optim.LBFGS(params, lr=0.5, max_iter=4, history_size=3)

    on_neuron = train(model, make, "neuron", closure_style=True)
    # Native kernels round as the chip does (e.g. VectorE divide); LBFGS's line search over several
    # inner iterations grows a last-bit difference to ~1e-5.
    assert_same(on_neuron, train(model, make, "cpu", closure_style=True), rtol=1e-4)


def test_muon_matches_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8, bias=False), nn.Tanh(), nn.Linear(8, 3, bias=False))

    def make(params):
        return torch.optim.Muon(params, lr=0.02)

    assert_same(train(model, make, "neuron"), train(model, make, "cpu"))


def test_default_variant_on_neuron_is_foreach():
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = list(make_model().to("neuron").parameters())
    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    assert foreach and not fused


# SparseAdam needs sparse gradients, which are unsupported on neuron: see test_unsupported.py.
