"""DataLoader feeding neuron: pin_memory=True (device memory is host memory) and worker processes."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _dataset():
    return TensorDataset(torch.arange(32.0).view(16, 2), torch.arange(16))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pinned_batches_move_to_neuron(num_workers):
    loader = DataLoader(_dataset(), batch_size=4, pin_memory=True, num_workers=num_workers)
    seen = []
    for x, y in loader:
        x, y = x.to("neuron", non_blocking=True), y.to("neuron", non_blocking=True)
        assert x.device.type == "neuron" and y.device.type == "neuron"
        seen.append((x * 2).sum().item())
    assert sum(seen) == 2 * sum(range(32))


def test_pin_memory_is_a_host_copy():
    t = torch.ones(3)
    pinned = t.pin_memory()
    assert pinned.device.type == "cpu" and torch.equal(pinned, t) and pinned.data_ptr() != t.data_ptr()
