"""Which ops ran natively on the device and which fell back to the host (TorchNeuron's op tracking)."""

from __future__ import annotations

import collections
import threading

from neuronsim.device import clock

_lock = threading.Lock()
executed: collections.Counter = collections.Counter()  # op name -> calls run by a native kernel
fallback: collections.Counter = collections.Counter()  # op name -> calls computed on the host
# (Calls the C++ cached op ran are counted when its queue drains: clock.drain, before any count here.)


def record_native(name: str) -> None:
    clock._drained()
    with _lock:
        executed[name] += 1


def record_queued(name: str) -> None:
    """``record_native`` for a call the C++ cached op ran (the drain calls this)."""
    with _lock:
        executed[name] += 1


def record_fallback(name: str) -> None:
    clock._drained()
    with _lock:
        fallback[name] += 1


def get_executed_ops() -> list[str]:
    """Names of the ops run on the device by native kernels, first-seen order, each once."""
    clock._drained()
    with _lock:
        return list(executed)


def get_fallback_ops() -> list[str]:
    """Names of the ops that fell back to the host, first-seen order, each once."""
    clock._drained()
    with _lock:
        return list(fallback)


def get_op_counts() -> dict[str, dict[str, int]]:
    clock._drained()
    with _lock:
        return {"executed": dict(executed), "fallback": dict(fallback)}


def clear_op_tracking() -> None:
    clock._drained()
    with _lock:
        executed.clear()
        fallback.clear()
