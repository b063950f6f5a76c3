"""Streams and events, kept by the C++ device guard (``cpp/``) as CUDA's are by its guard.

Each logical core runs its work in issue order on one timeline, so work is always complete:
queries are True and waits return at once. Streams are labels with distinct ids; the current
stream is per thread and per device. Events record the simulated device clock of their stream's
core, so ``Event.elapsed_time`` is simulated device time in milliseconds.
"""

from __future__ import annotations

import torch

from neuronsim.device import state


def _device(device) -> torch.device:
    return torch.device(state.DEVICE_TYPE, state.device_index(device))


class Stream(torch.Stream):
    """``torch.neuron.Stream(device=None, priority=0)``; lower priority numbers run first."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:  # stream_id / device_index / device_type: an existing stream, as torch.Stream
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=_device(device), priority=priority)


class Event:
    """``torch.neuron.Event(enable_timing=False, blocking=False)``: a ``torch.Event`` of the current
    neuron device (torch's event methods accept only that exact type, so not a subclass)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(device=_device(None), enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def _as_neuron_stream(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                  device_type=stream.device_type)


def default_stream(device=None) -> Stream:
    return Stream(stream_id=0, device_index=state.device_index(device),
                  device_type=torch.accelerator.current_stream().device_type)


def current_stream(device=None) -> Stream:
    return _as_neuron_stream(torch.accelerator.current_stream(state.device_index(device)))


def set_stream(stream: torch.Stream | None) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class stream:  # noqa: N801 (torch.cuda.stream's name)
    """Context manager making ``s`` its device's current stream (None: no change)."""

    def __init__(self, s: torch.Stream | None):
        self.stream = s
        self.previous = None

    def __enter__(self):
        if self.stream is not None:
            self.previous = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.previous is not None:
            torch.accelerator.set_stream(self.previous)
        return False


def synchronize(device=None) -> None:
    """Wait for all queued work on the device: everything already ran, in order."""
    state.device_index(device)


def wait_stream(s: torch.Stream) -> None:
    current_stream().wait_stream(s)


def wait_event(e: torch.Event) -> None:
    current_stream().wait_event(e)


def record_event(e: torch.Event | None = None) -> torch.Event:
    return current_stream().record_event(e)
