"""Streams and events: in-order execution, and Event.elapsed_time in simulated device time."""

from __future__ import annotations

import pytest
import torch

from neuronsim.device import clock


def test_stream_api():
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("neuron", 0)
    assert s.query()
    s.synchronize()
    assert torch.neuron.Stream(device="neuron:1", priority=-1).device.index == 1
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        y = torch.ones(4, device="neuron") * 2
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    y.record_stream(s)
    s.wait_stream(torch.neuron.default_stream())
    torch.neuron.set_stream(torch.neuron.default_stream())
    torch.neuron.synchronize()


def test_event_elapsed_time_is_simulated_device_time():
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    x = torch.ones(64, device="neuron")
    device_clock = clock.clock(0)
    start.record()
    t0 = device_clock.now_ns
    for _ in range(3):
        x = x * 2
    end.record()
    t1 = device_clock.now_ns
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) == pytest.approx((t1 - t0) / 1e6)
    assert start.elapsed_time(end) > 0


def test_event_elapsed_time_is_the_same_every_run():
    def measure():
        x = torch.ones(128, device="neuron")
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        (x @ x + 1).sum()
        end.record()
        return start.elapsed_time(end)

    assert measure() == measure()


def test_event_errors_and_record_event():
    plain = torch.neuron.Event()
    plain.record()
    with pytest.raises(ValueError, match="enable_timing"):  # torch.Event's own check
        plain.elapsed_time(torch.neuron.Event())
    timed = torch.neuron.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(torch.neuron.Event(enable_timing=True))
    unrecorded = torch.neuron.Event()
    assert unrecorded.query()
    unrecorded.synchronize()
    recorded = torch.neuron.current_stream().record_event()
    assert recorded.device == torch.device("neuron", 0)
    torch.neuron.wait_event(recorded)
