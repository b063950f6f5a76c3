"""Lazy conjugate and negative bits on neuron tensors: copies resolve them (no endless recursion
through ATen's math-bit fallback), and ops on conjugated inputs match the CPU."""

from __future__ import annotations

import pytest
import torch

import neuronsim

neuronsim.enable()


@pytest.fixture
def z():
    g = torch.Generator().manual_seed(0)
    return torch.complex(torch.randn(5, 6, generator=g), torch.randn(5, 6, generator=g))


def test_resolving_a_conjugate_on_the_device(z):
    d = z.to("neuron").conj()
    assert d.is_conj()
    resolved = d.resolve_conj()
    assert not resolved.is_conj() and torch.equal(resolved.cpu(), z.conj().resolve_conj())
    assert torch.equal(d.clone().cpu(), z.conj())
    out = torch.empty_like(z, device="neuron")
    out.copy_(d)
    assert torch.equal(out.cpu(), z.conj())


def test_conjugates_and_negatives_cross_the_host_link(z):
    assert torch.equal(z.conj().to("neuron").cpu(), z.conj())  # a CPU conjugate sent to the device
    assert torch.equal(z.to("neuron").conj().cpu(), z.conj())  # and one brought back
    neg = torch._neg_view(z.to("neuron"))
    assert neg.is_neg() and torch.equal(neg.resolve_neg().cpu(), -z)
    into_conj = torch.zeros(5, 6, dtype=torch.complex64, device="neuron").conj()
    into_conj.copy_(z.to("neuron"))  # writing through a conjugated view stores the conjugate
    assert torch.equal(into_conj.cpu(), z) and torch.equal(into_conj.conj().cpu(), z.conj())


def test_fft_ops_that_conjugate_internally(z):
    x = z.real.contiguous()
    for fn in (lambda t: torch.fft.hfft(t, n=10, dim=1, norm="ortho"), lambda t: torch.fft.ihfft(t)):
        torch.testing.assert_close(fn(x.to("neuron")).cpu(), fn(x))
