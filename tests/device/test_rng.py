"""Device RNG: torch.manual_seed reproducibility, torch.neuron RNG functions, checkpoint and fork_rng."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DRAWS = {
    "randn": lambda: torch.randn(8, device="neuron"),
    "rand": lambda: torch.rand(8, device="neuron"),
    "randint": lambda: torch.randint(0, 100, (8,), device="neuron"),
    "randperm": lambda: torch.randperm(8, device="neuron"),
    "normal_": lambda: torch.empty(8, device="neuron").normal_(),
    "bernoulli": lambda: torch.bernoulli(torch.full((8,), 0.5, device="neuron")),
    "multinomial": lambda: torch.multinomial(torch.ones(8, device="neuron"), 4),
    "dropout": lambda: F.dropout(torch.ones(8, device="neuron"), 0.5),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_manual_seed_gives_the_same_values_each_run(name):
    draw = DRAWS[name]
    torch.manual_seed(1234)
    first = [draw().cpu() for _ in range(2)]
    torch.manual_seed(1234)
    second = [draw().cpu() for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], first[1]) or name == "randperm"


def test_device_draws_its_own_stream_for_the_same_seed():
    """normal_, uniform_, bernoulli_, random_ and randperm run on the device's PRNG (kernels/random_fill.py),
    as on any accelerator: a seed repeats them, and they are not the CPU's numbers."""
    torch.manual_seed(7)
    cpu = torch.randn(16)
    torch.manual_seed(7)
    on_device = torch.randn(16, device="neuron").cpu()
    assert "aten::normal_" in torch.neuron.get_executed_ops()
    assert not torch.equal(on_device, cpu)
    torch.manual_seed(7)
    assert torch.equal(torch.randn(16, device="neuron").cpu(), on_device)


def test_torch_neuron_seed_functions():
    torch.neuron.manual_seed(5)
    assert torch.neuron.initial_seed() == 5
    a = torch.rand(4, device="neuron").cpu()
    torch.neuron.manual_seed_all(5)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), a)
    torch.neuron.seed()
    assert torch.neuron.initial_seed() != 5
    torch.neuron.seed_all()


def test_get_and_set_rng_state_replay():
    torch.manual_seed(0)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(5, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(5, device="neuron").cpu(), a)
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(states)


def test_each_device_has_its_own_generator():
    torch.manual_seed(3)
    on0 = torch.rand(4, device="neuron:0").cpu()
    on1 = torch.rand(4, device="neuron:1").cpu()
    assert torch.equal(on0, on1), "manual_seed seeds every device alike"
    torch.neuron.manual_seed(9)  # only the current device (0)
    assert not torch.equal(torch.rand(4, device="neuron:0").cpu(), torch.rand(4, device="neuron:1").cpu())


def test_fork_rng_restores_the_device_state():
    torch.manual_seed(0)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        torch.randn(3, device="neuron")
    after = torch.randn(3, device="neuron").cpu()
    torch.manual_seed(0)
    assert torch.equal(torch.randn(3, device="neuron").cpu(), after)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_with_dropout_preserves_the_rng(use_reentrant):
    lin = torch.nn.Linear(8, 8).to("neuron")

    def block(x):
        return F.dropout(lin(x), 0.5).sin()

    x = torch.randn(4, 8, device="neuron", requires_grad=True)
    torch.manual_seed(11)
    block(x).sum().backward()
    plain = x.grad.cpu()
    x.grad = None
    torch.manual_seed(11)
    checkpoint(block, x, use_reentrant=use_reentrant).sum().backward()
    assert torch.equal(x.grad.cpu(), plain)


def test_device_generator_objects_are_unavailable_as_on_torchneuron():
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.Generator(device="neuron")
