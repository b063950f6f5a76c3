"""A native op's cache key: the short forms give the general form's key, and declines alike."""

from __future__ import annotations

import pytest
import torch

import neuronsim
from neuronsim.device.native.signature import Decline, arg_key, inplace_key, signature_key

neuronsim.enable()


def _calls():
    base = torch.arange(24.0).to("neuron")
    a = base[:12].view(3, 4)
    yield "self alias", (a, a)
    yield "same view, other object", (a, base[:12].view(3, 4))
    yield "disjoint", (a, base[12:].view(3, 4))
    yield "transposed operand", (a, torch.randn(4, 3, device="neuron").t())
    yield "cpu scalar", (a, torch.tensor(2.0))
    yield "number", (a, 3)
    yield "overlapping", (a, base[2:14].view(3, 4))
    yield "foreach lists", ([a, base[12:].view(3, 4)], [base[12:].view(3, 4), a])


@pytest.mark.parametrize("name, args", list(_calls()), ids=[n for n, _ in _calls()])
def test_the_in_place_short_key_is_the_general_key(name, args):
    try:
        expected = signature_key(args, {}, frozenset(), True)
    except Decline:
        with pytest.raises(Decline):
            inplace_key(args)
        return
    assert inplace_key(args) == expected


def test_the_plain_key_is_the_general_key_and_tells_layouts_apart():
    a = torch.randn(3, 4, device="neuron")
    assert (tuple(map(arg_key, (a, a))),) == signature_key((a, a), {})
    keys = {arg_key(t) for t in (a, a.t(), a.double(), a.reshape(4, 3), a[:, :2])}
    assert len(keys) == 5  # layout, dtype, shape and stride each change the key
    with pytest.raises(Decline):
        arg_key(torch.ones(2))  # a CPU tensor operand: the host runs the call
