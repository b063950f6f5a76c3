"""torch.accelerator resolves to neuron: availability, device index, synchronize, memory stats."""

from __future__ import annotations

import torch


def test_current_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    torch.accelerator.synchronize()
    torch.accelerator.synchronize("neuron:0")


def test_device_index_follows_torch_neuron():
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1 == torch.neuron.current_device()
    with torch.accelerator.device_index(2):
        assert torch.neuron.current_device() == 2
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index(0)


def test_memory_stats():
    keep = torch.empty(1000, device="neuron")
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()
    assert torch.accelerator.max_memory_reserved() >= torch.accelerator.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats == torch.neuron.memory_stats()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    torch.accelerator.reset_accumulated_memory_stats()
    torch.accelerator.empty_cache()
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.neuron.get_device_properties().total_memory and free < total
    del keep


def test_current_stream():
    s = torch.accelerator.current_stream()
    assert s.device.type == "neuron"
    torch.accelerator.set_stream(s)
