"""What ordinary training touches: autograd, views, in-place ops, grad clipping, LR schedulers,
GradScaler, activation checkpointing, inference_mode, and the examples' losses against the CPU."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_gpt  # noqa: E402
import train_mlp  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2))


def test_module_to_neuron_keeps_parameters():
    model = _model().to("neuron")
    for p in model.parameters():
        assert isinstance(p, nn.Parameter) and p.device.type == "neuron" and p.requires_grad
    cpu = copy.deepcopy(model).to("cpu")
    assert all(p.device.type == "cpu" for p in cpu.parameters())


def test_autograd_matches_cpu():
    grads = {}
    for device in ("cpu", "neuron"):
        model = _model().to(device)
        x = torch.linspace(-1, 1, 12).view(3, 4).to(device).requires_grad_()
        model(x).pow(2).mean().backward()
        grads[device] = [x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]
    for n, c in zip(grads["neuron"], grads["cpu"], strict=True):
        torch.testing.assert_close(n, c, rtol=1e-6, atol=1e-7)


def test_views_and_in_place_ops_write_through():
    base = torch.zeros(4, 4, device="neuron")
    base[1].fill_(1)
    base[:, 2] += 2
    base.diagonal().mul_(10)
    view = base.t()[1:3]
    view.add_(1)
    expected = torch.zeros(4, 4)
    expected[1].fill_(1)
    expected[:, 2] += 2
    expected.diagonal().mul_(10)
    expected.t()[1:3].add_(1)
    assert torch.equal(base.cpu(), expected)
    assert view._base is base and view.device == base.device


def test_in_place_on_saved_tensor_is_caught_by_autograd():
    a = torch.randn(3, device="neuron", requires_grad=True)
    b = a.sigmoid()
    version = b._version
    b.mul_(2)
    assert b._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()


@pytest.mark.parametrize("foreach", [False, True])
def test_grad_clipping(foreach):
    norms, grads = {}, {}
    for device in ("cpu", "neuron"):
        model = _model().to(device)
        model(torch.ones(2, 4, device=device)).sum().backward()
        norms[device] = nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach).cpu()
        nn.utils.clip_grad_value_(model.parameters(), 0.01, foreach=foreach)
        grads[device] = [p.grad.cpu() for p in model.parameters()]
    torch.testing.assert_close(norms["neuron"], norms["cpu"])
    for n, c in zip(grads["neuron"], grads["cpu"], strict=True):
        torch.testing.assert_close(n, c)


SCHEDULERS = {
    "StepLR": lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5),
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=10),
    "CosineAnnealingWarmRestarts": lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3),
    "ReduceLROnPlateau": lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_schedulers(name):
    lrs = {}
    for device in ("cpu", "neuron"):
        model = _model().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        schedule = SCHEDULERS[name](optimizer)
        lrs[device] = []
        for _ in range(5):
            loss = model(torch.ones(2, 4, device=device)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step(loss.item()) if name == "ReduceLROnPlateau" else schedule.step()
            lrs[device].append(optimizer.param_groups[0]["lr"])
    assert lrs["neuron"] == pytest.approx(lrs["cpu"], rel=1e-6)


def test_grad_scaler():
    model = _model().to("neuron")
    optimizer = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("neuron", init_scale=2.0**8)
    loss = model(torch.ones(2, 4, device="neuron")).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**8
    # An inf gradient skips the step and backs off the scale.
    before = [p.detach().cpu().clone() for p in model.parameters()]
    loss = model(torch.ones(2, 4, device="neuron")).sum() * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**7
    assert all(torch.equal(b, p.cpu()) for b, p in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_matches_plain_backward(use_reentrant):
    model = _model().to("neuron")
    x = torch.ones(2, 4, device="neuron", requires_grad=True)
    model(x).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    checkpoint(model, x, use_reentrant=use_reentrant).sum().backward()
    for p, g in zip(model.parameters(), plain, strict=True):
        assert torch.equal(p.grad.cpu(), g.cpu())


def test_inference_mode_and_no_grad():
    model = _model().to("neuron")
    with torch.inference_mode():
        out = model(torch.ones(1, 4, device="neuron"))
    assert out.is_inference() and not out.requires_grad
    with torch.no_grad():
        assert not model(torch.ones(1, 4, device="neuron")).requires_grad


def test_printing_and_item():
    t = torch.tensor([[1.5, -2.0]], device="neuron")
    assert "device='neuron:0'" in repr(t)
    assert "dtype=torch.bfloat16" in repr(t.bfloat16())
    assert t[0, 0].item() == 1.5
    assert t.tolist() == [[1.5, -2.0]]


def _losses(module, argv):
    return module.main([*argv, "--device", "cpu"]), module.main([*argv, "--device", "neuron"])


def test_train_mlp_example_matches_cpu(capsys):
    cpu, neuron = _losses(train_mlp, ["--steps", "8", "--seed", "3", "--hidden", "32"])
    assert neuron == pytest.approx(cpu, rel=1e-5)
    assert neuron[-1] < neuron[0]
    assert "loss" in capsys.readouterr().out


def test_train_gpt_example_matches_cpu():
    argv = ["--steps", "6", "--seed", "1", "--embd", "32", "--block", "16", "--batch", "4", "--quiet"]
    cpu, neuron = _losses(train_gpt, argv)
    assert neuron == pytest.approx(cpu, rel=1e-5)
    assert neuron[-1] < neuron[0]


def test_train_gpt_with_dropout_is_reproducible_on_neuron():
    argv = ["--steps", "3", "--embd", "32", "--block", "16", "--batch", "4", "--dropout", "0.1", "--quiet"]
    assert train_gpt.main([*argv, "--device", "neuron"]) == train_gpt.main([*argv, "--device", "neuron"])
