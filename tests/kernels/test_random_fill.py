"""Random fills from the device PRNG (kernels/random_fill.py): normal_, uniform_, bernoulli_,
random_ and randperm: their distributions within statistical bounds, torch.manual_seed repeating
them, successive calls differing, and the same values under fast numerics."""

from __future__ import annotations

import math

import pytest
import torch
from kernel_checks import ran_natively

import neuronsim.kernels.random_fill  # noqa: F401  (registers the real kernels before the manifest lists them)
from neuronsim.options import options

N = 128 * 300


def _fill(name, dtype=torch.float32, *args):
    return getattr(torch.empty(N, dtype=dtype, device="neuron"), name)(*args).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normal_and_uniform_moments(dtype):
    x = _fill("normal_", dtype, 2.0, 3.0).float()
    assert ran_natively("aten::normal_")
    assert abs(x.mean() - 2.0) < 5 * 3.0 / math.sqrt(N) and abs(x.std() - 3.0) < 0.05 * 3.0
    assert (abs(x - 2.0) > 3 * 3.0).float().mean() < 0.01  # tails of a normal, not of a uniform
    u = _fill("uniform_", dtype, -1.0, 3.0).float()
    assert ran_natively("aten::uniform_")
    assert u.min() >= -1.0 and u.max() <= 3.0
    assert abs(u.mean() - 1.0) < 5 * 4 / math.sqrt(12 * N)
    hist = torch.histc(u, bins=8, min=-1.0, max=3.0) / N
    assert (abs(hist - 1 / 8) < 0.01).all(), hist


def test_bernoulli_with_a_scalar_and_a_tensor_of_probabilities():
    b = _fill("bernoulli_", torch.float32, 0.3)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 5 * math.sqrt(0.21 / N)
    p = torch.linspace(0, 1, 128).repeat(300).to("neuron")
    drawn = torch.empty(N, device="neuron").bernoulli_(p).cpu().view(300, 128)
    assert ran_natively("aten::bernoulli_.float") and ran_natively("aten::bernoulli_.Tensor")
    assert drawn[:, 0].sum() == 0 and drawn[:, -1].sum() == 300
    assert abs(drawn.mean(0) - torch.linspace(0, 1, 128)).max() < 0.12


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_random_integers_cover_the_range(dtype):
    x = torch.empty(N, dtype=dtype, device="neuron").random_(-5, 10).cpu()
    assert ran_natively("aten::random_.from")
    assert x.dtype == dtype and set(x.unique().tolist()) == set(range(-5, 10))
    counts = torch.bincount((x.long() + 5), minlength=15).float() / N
    assert (abs(counts - 1 / 15) < 0.01).all()
    y = torch.empty(1000, dtype=dtype, device="neuron").random_(100).cpu()
    assert y.min() >= 0 and y.max() < 100


@pytest.mark.parametrize("n", [1, 300])
def test_randperm_is_a_permutation(n):
    p = torch.randperm(n, device="neuron")
    assert ran_natively("aten::randperm.generator_out")
    assert p.dtype == torch.int64 and sorted(p.cpu().tolist()) == list(range(n))
    if n > 1:
        assert not torch.equal(p.cpu(), torch.arange(n))


def test_manual_seed_repeats_fills_and_successive_calls_differ():
    def draws():
        return [_fill("normal_"), _fill("uniform_"), _fill("bernoulli_"),
                torch.randperm(50, device="neuron").cpu()]

    torch.manual_seed(11)
    first, again = draws(), draws()
    torch.manual_seed(11)
    second = draws()
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    with options(numerics="fast"):  # the Program runs under fast numerics too: the same values
        torch.manual_seed(11)
        assert all(torch.equal(a, b) for a, b in zip(first, draws(), strict=True))


def test_an_explicit_generator_runs_on_the_host():
    g = torch.Generator().manual_seed(0)
    x = torch.empty(10, device="neuron").normal_(generator=g)
    assert x.device.type == "neuron" and "aten::normal_" in torch.neuron.get_fallback_ops()
