"""Simulation options: one frozen object, validated, built from the environment, scoped."""

import pytest

from neuronsim import env, options
from neuronsim.errors import OptionError
from neuronsim.options import SimOptions, current, from_environment


def test_defaults_and_validation():
    opts = SimOptions()
    got = (opts.chip, opts.numerics, opts.executor, opts.uninitialized_memory)
    assert got == ("trn2", "exact", "tiered", "nan")
    with pytest.raises(OptionError, match="numerics='approx'"):
        SimOptions(numerics="approx")
    with pytest.raises(OptionError, match="unknown option"):
        opts.replace(colour="blue")


def test_from_environment():
    opts = from_environment(
        {env.NEURON_SIM_CHIP: "trn3", env.NEURON_SIM_NUMERICS: "FAST", env.NEURON_SIM_SEED: "7"})
    assert (opts.chip, opts.numerics, opts.seed) == ("trn3", "fast", 7)
    with pytest.raises(OptionError, match="from the environment"):
        from_environment({env.NEURON_SIM_EXECUTOR: "gpu"})
    with pytest.raises(OptionError, match="must be an integer"):
        from_environment({env.NEURON_SIM_SEED: "x"})


def test_nki_version_names_a_known_release():
    """The NKI release simulated where releases differ (neuronsim/nki_releases.py): the current one
    by default; "0.4.0" is "0.4"; an unknown release is an error listing the known ones."""
    assert SimOptions().nki_version == "0.6"
    assert from_environment({env.NEURON_SIM_NKI_VERSION: "0.4.0"}).nki_version == "0.4"
    with pytest.raises(OptionError, match=r"NKI release '0\.7' .*known: 0\.3, 0\.4, 0\.5, 0\.6"):
        SimOptions(nki_version="0.7")
    with pytest.raises(OptionError, match="from the environment"):
        from_environment({env.NEURON_SIM_NKI_VERSION: "latest"})


def test_context_manager_scopes_changes():
    before = current()
    with options(chip="trn3") as inner:
        assert current() is inner and inner.chip == "trn3"
        with options(executor="reference"):
            assert current().chip == "trn3" and current().executor == "reference"
        assert current().executor == before.executor
    assert current() == before


def test_a_backward_started_in_a_scope_sees_its_options():

    import torch

    import neuronsim

    neuronsim.enable()
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            seen.append(current().numerics)
            return grad * 2

    x = torch.ones(3, device="neuron", requires_grad=True)
    with options(numerics="fast"):
        Probe.apply(x).sum().backward()
    Probe.apply(x).sum().backward()
    assert seen == ["fast", "exact"]  # backward runs on the autograd device thread
