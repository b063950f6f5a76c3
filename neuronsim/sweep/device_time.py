"""Where a run's simulated device time went: native kernels or host fallbacks, and which ops fell back.

``with DeviceTime() as t: ...`` starts every device clock and the op tracking afresh and, at the end,
:attr:`DeviceTime.share` is the native kernels' share of the simulated device time (launch overheads
included on both sides; the run's own host copies — ``.to("neuron")``, ``.cpu()``, ``.item()`` — are
left out: they are the script's, not an op's) and :attr:`DeviceTime.fallbacks` the ops computed on
the host, with their calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

_USER_COPIES = ("h2d", "d2h")
_CAPACITY = 1 << 22  # clock records kept while measuring: every event of a sweep's run


@dataclass
class DeviceTime:
    native_ns: float = 0.0
    fallback_ns: float = 0.0
    fallbacks: dict[str, int] = field(default_factory=dict)
    executed: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float | None:
        """Native share of the simulated device time (None: no device time at all)."""
        total = self.native_ns + self.fallback_ns
        return self.native_ns / total if total else None

    def __enter__(self) -> DeviceTime:
        from neuronsim.device import clock

        for c in clock.all_clocks().values():
            c.reset()
        clock.clock(0).set_capacity(_CAPACITY)
        torch.neuron.clear_op_tracking()
        return self

    def __exit__(self, *exc) -> bool:
        from neuronsim.device import clock

        for c in clock.all_clocks().values():
            for e in c.events():
                if e.kind in _USER_COPIES:
                    continue
                if e.native:
                    self.native_ns += e.duration_ns
                else:
                    self.fallback_ns += e.duration_ns
            c.set_capacity(clock.DEFAULT_CAPACITY)
        counts = torch.neuron.get_op_counts()
        self.fallbacks = dict(counts["fallback"])
        self.executed = dict(counts["executed"])
        return False

    def merge(self, other: DeviceTime) -> None:
        self.native_ns += other.native_ns
        self.fallback_ns += other.fallback_ns
        for mine, theirs in ((self.fallbacks, other.fallbacks), (self.executed, other.executed)):
            for name, n in theirs.items():
                mine[name] = mine.get(name, 0) + n
