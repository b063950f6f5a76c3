"""Streams and events. The emulated device runs every op in order, as it is issued, on one
timeline, so work is always complete: queries are True and waits return at once. Events record
the simulated device clock, so ``Event.elapsed_time`` is simulated device time in milliseconds.
"""

from __future__ import annotations

import contextlib

import torch

from neuronsim.device import clock, state


class Stream(torch.Stream):
    """``torch.neuron.Stream(device=None, priority=0)``; lower priority numbers run first."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        index = state.device_index(device)
        device = torch.device(state.DEVICE_TYPE, index)
        self = super().__new__(cls, device=device, priority=priority, **kwargs)
        self._index = index  # torch's Python device guard labels every stream neuron:0
        return self

    @property
    def device(self) -> torch.device:
        return torch.device(state.DEVICE_TYPE, self._index)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Event) -> None:
        return None

    def wait_stream(self, stream: torch.Stream) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event


class Event:
    """``torch.neuron.Event(enable_timing=False, blocking=False)`` on the simulated device clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device: torch.device | None = None
        self._time_ns: float | None = None

    def record(self, stream: torch.Stream | None = None) -> None:
        index = state.current_device() if stream is None else stream.device.index or 0
        self.device = torch.device(state.DEVICE_TYPE, index)
        self._time_ns = clock.clock(index).now_ns

    def wait(self, stream: torch.Stream | None = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        """Simulated device milliseconds from this event to ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        return f"<torch.neuron.Event device={self.device} recorded={self._time_ns is not None}>"


_current_streams: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    return Stream(device=device)


def current_stream(device=None) -> Stream:
    index = state.device_index(device)
    found = _current_streams.get(index)
    return found if found is not None else default_stream(index)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        _current_streams[stream.device.index or 0] = stream


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    if s is None:
        yield
        return
    index = s.device.index or 0
    previous = _current_streams.get(index)
    _current_streams[index] = s
    try:
        yield
    finally:
        if previous is None:
            _current_streams.pop(index, None)
        else:
            _current_streams[index] = previous


def synchronize(device=None) -> None:
    """Wait for all queued work on the device: everything already ran, in order."""
    state.device_index(device)


def wait_stream(s: torch.Stream) -> None:
    return None


def wait_event(e: Event) -> None:
    return None


def record_event(e: Event | None = None) -> Event:
    return current_stream().record_event(e)
