"""The simulated device clock of each logical NeuronCore.

Every op on the device appends to its clock; the clock's ``now_ns`` is simulated device time, not
wall time, so it is the same on every run. A host-fallback op is charged as separate entries: the
launch/dispatch overhead, the copy of its inputs to the host and the copy of its results back over
the host link (half a host round trip each way, plus bytes / link bandwidth). The host computation
itself is not device time and is not modelled. Native kernels (the simulator) charge their own
schedule through :meth:`DeviceClock.charge_kernel`. Costs come from the chip data, never inline.

Records are kept in a bounded ring (the newest ``capacity``); totals are exact regardless.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, NamedTuple

from neuronsim.device import settings
from neuronsim.options import current as current_options

DEFAULT_CAPACITY = 1 << 16

# Charges the C++ cached op (cpp/neuron_ops.cpp) queued: set by native/fast.py when it is in use, a
# ctypes view of the queue's length and the drain that charges them here in order. Every charge and
# every read drains first, so the clocks read as if each op had charged itself.
queued = None
drain = None


def _drained() -> None:
    if queued is not None and queued.value:
        drain()


class ClockEvent(NamedTuple):
    """One entry on the device timeline."""

    name: str  # the op, e.g. "aten::add.Tensor"
    kind: str  # launch | to_host | to_device | kernel | h2d | d2h | collective
    signature: tuple  # ((dtype, shape), ...) of the op's device tensors
    start_ns: float
    duration_ns: float
    native: bool  # run by a native kernel (the simulator) rather than a host fallback
    bytes: int
    wall_ns: int | None = None  # host time.time_ns() when the op was issued (aligns host traces)
    kernel: Any = None  # a native kernel's sim Prepared (Program + schedule), for instruction detail
    flops: float = 0.0  # a native kernel's model FLOPs
    engine_busy_ns: Any = None  # a native kernel's busy time per engine track (Timeline.engine_busy_ns)


class _Costs(NamedTuple):
    launch_ns: float
    half_round_trip_ns: float
    ns_per_host_byte: float


def _costs_for_chip() -> _Costs:
    chip = settings.chip()
    return _Costs(
        launch_ns=chip.kernel_launch_overhead_ns,
        half_round_trip_ns=chip.host_round_trip_latency_ns / 2,
        ns_per_host_byte=1e9 / chip.host_link_bandwidth_bytes_per_s,
    )


class DeviceClock:
    def __init__(self, index: int, capacity: int = DEFAULT_CAPACITY):
        self.index = index
        self._now_ns = 0.0
        self._lock = threading.Lock()
        self._records: collections.deque = collections.deque(maxlen=capacity)
        self._chip_name: str | None = None
        self._costs: _Costs | None = None
        self._options = None  # the options object the costs were last read under
        self.host_bytes_to_host = 0
        self.host_bytes_to_device = 0

    @property
    def now_ns(self) -> float:
        _drained()
        return self._now_ns

    @now_ns.setter
    def now_ns(self, value: float) -> None:
        _drained()
        self._now_ns = value

    # ---- charging -------------------------------------------------------------------------------
    def _current_costs(self) -> _Costs:
        opts = current_options()
        if opts is self._options:  # options are frozen: the same object, the same chip
            return self._costs
        name = settings.chip().name
        if name != self._chip_name:
            self._costs, self._chip_name = _costs_for_chip(), name
        self._options = opts
        return self._costs

    def charge_fallback(self, name: str, signature: tuple, bytes_in: int, bytes_out: int) -> None:
        _drained()
        c = self._current_costs()
        to_host = c.half_round_trip_ns + bytes_in * c.ns_per_host_byte
        to_device = c.half_round_trip_ns + bytes_out * c.ns_per_host_byte
        with self._lock:
            start = self._now_ns
            self._now_ns = start + c.launch_ns + to_host + to_device
            self.host_bytes_to_host += bytes_in
            self.host_bytes_to_device += bytes_out
            self._records.append(
                (0, name, signature, start, c.launch_ns, to_host, bytes_in, to_device, bytes_out,
                 time.time_ns())
            )

    def charge_transfer(self, name: str, signature: tuple, nbytes: int, to_device: bool) -> None:
        """A copy between host and device memory (``.to('neuron')``, ``.cpu()``, ``.item()``)."""
        _drained()
        c = self._current_costs()
        duration = c.half_round_trip_ns + nbytes * c.ns_per_host_byte
        with self._lock:
            start = self._now_ns
            self._now_ns = start + duration
            if to_device:
                self.host_bytes_to_device += nbytes
            else:
                self.host_bytes_to_host += nbytes
            self._records.append((1, name, signature, start, duration, nbytes, to_device, time.time_ns()))

    def charge_kernel(
        self,
        name: str,
        signature: tuple,
        duration_ns: float,
        nbytes: int = 0,
        *,
        kernel: Any = None,
        flops: float = 0.0,
        engine_busy_ns: Any = None,
    ) -> None:
        """A native kernel: its launch overhead, then ``duration_ns`` from the simulator's schedule.

        ``kernel`` (the sim ``Prepared``), ``flops`` and ``engine_busy_ns`` are kept for the
        profiler; nothing is derived from them here.
        """
        _drained()
        c = self._current_costs()
        wall = time.time_ns()
        with self._lock:
            start = self._now_ns
            self._now_ns = start + c.launch_ns + duration_ns
            self._records.append(
                (2, name, signature, start, c.launch_ns, duration_ns, nbytes, wall, kernel, flops,
                 engine_busy_ns)
            )

    def charge_native(self, record: tuple) -> None:
        """``charge_kernel`` for a cached native op: ``record`` is its fixed part, made once per
        signature — (name, signature, duration_ns, nbytes, kernel, flops, engine_busy_ns)."""
        _drained()
        self.charge_queued(record, time.time_ns())

    def charge_queued(self, record: tuple, wall: int) -> None:
        """``charge_native`` of a call made at ``wall`` (time.time_ns()), queued by the C++ cached op
        (no drain: the drain calls this)."""
        c = self._current_costs()
        with self._lock:
            start = self._now_ns
            self._now_ns = start + c.launch_ns + record[2]
            self._records.append((4, record, start, c.launch_ns, wall))

    def charge_collective(self, name: str, signature: tuple, start_ns: float, duration_ns: float,
                          nbytes: int = 0) -> None:
        """A collective (torch.distributed) from ``start_ns``, when every rank of its group was ready,
        for ``duration_ns`` (neuronsim/sim/interconnect.py); the clock moves to its end."""
        _drained()
        with self._lock:
            self._now_ns = max(self._now_ns, start_ns + duration_ns)
            self._records.append((3, name, signature, start_ns, duration_ns, nbytes, time.time_ns()))

    # ---- reading --------------------------------------------------------------------------------
    def events(self) -> list[ClockEvent]:
        _drained()
        with self._lock:
            records = list(self._records)
        out: list[ClockEvent] = []
        for rec in records:
            if rec[0] == 0:
                _, name, sig, start, launch, to_host, b_in, to_dev, b_out, wall = rec
                out.append(ClockEvent(name, "launch", sig, start, launch, False, 0, wall))
                out.append(ClockEvent(name, "to_host", sig, start + launch, to_host, False, b_in, wall))
                out.append(
                    ClockEvent(name, "to_device", sig, start + launch + to_host, to_dev, False, b_out, wall)
                )
            elif rec[0] == 1:
                _, name, sig, start, duration, nbytes, to_device, wall = rec
                kind = "h2d" if to_device else "d2h"
                out.append(ClockEvent(name, kind, sig, start, duration, False, nbytes, wall))
            elif rec[0] == 4:
                _, (name, sig, duration, nbytes, kernel, flops, busy), start, launch, wall = rec
                out.append(ClockEvent(name, "launch", sig, start, launch, True, 0, wall))
                out.append(ClockEvent(name, "kernel", sig, start + launch, duration, True, nbytes, wall,
                                      kernel, flops, busy))
            elif rec[0] == 3:
                _, name, sig, start, duration, nbytes, wall = rec
                out.append(ClockEvent(name, "collective", sig, start, duration, True, nbytes, wall))
            else:
                _, name, sig, start, launch, duration, nbytes, wall, kernel, flops, busy = rec
                out.append(ClockEvent(name, "launch", sig, start, launch, True, 0, wall))
                out.append(
                    ClockEvent(name, "kernel", sig, start + launch, duration, True, nbytes, wall, kernel,
                               flops, busy)
                )
        return out

    def reset(self) -> None:
        _drained()
        with self._lock:
            self._records.clear()
            self._now_ns = 0.0
            self.host_bytes_to_host = self.host_bytes_to_device = 0

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self._records = collections.deque(self._records, maxlen=capacity)


_clocks: dict[int, DeviceClock] = {}
_clocks_lock = threading.Lock()
_capacity = DEFAULT_CAPACITY  # records kept per clock (a profiling session asks for more)


def keep_records(capacity: int | None) -> None:
    """Keep the newest ``capacity`` records on every clock, those made later included (a profiling
    session asks for more while it records); None: back to the usual ``DEFAULT_CAPACITY``."""
    global _capacity
    with _clocks_lock:
        _capacity = DEFAULT_CAPACITY if capacity is None else capacity
        clocks = list(_clocks.values())
    for clk in clocks:
        if clk._records.maxlen != _capacity:
            clk.set_capacity(_capacity)


def all_clocks() -> dict[int, DeviceClock]:
    """Every device clock used so far, by device index."""
    with _clocks_lock:
        return dict(sorted(_clocks.items()))


def clock(index: int) -> DeviceClock:
    found = _clocks.get(index)
    if found is None:
        with _clocks_lock:
            found = _clocks.setdefault(index, DeviceClock(index, _capacity))
    return found
