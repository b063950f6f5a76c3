"""Simulated HBM of each logical NeuronCore: capacity, live bytes, CUDA-style statistics, OOM.

Device tensors live in host memory, so HBM is enforced by accounting: every neuron storage is
charged when it is made and released when its StorageImpl dies — by its deleter for the storages
the device's C++ library makes (``memory.py``), by a weakref callback for a CPU tensor's storage
adopted in Python (torch keeps a storage's Python object alive exactly as long as the StorageImpl).
A charge that would pass the capacity raises :class:`~neuronsim.errors.HbmCapacityError` before
anything changes, so every tensor allocated before it is intact.
"""

from __future__ import annotations

import ctypes
import threading
import weakref

from neuronsim import env
from neuronsim.device import settings
from neuronsim.device.dynamo_guard import skip_dynamo
from neuronsim.errors import HbmCapacityError

# TorchNeuron's allocator puts requests of 1 MB and more in the large pool
# (shared/reference/torchneuron-api.md §1.5); the stats keep the same split.
LARGE_POOL_MIN_BYTES = 1 << 20
POOLS = ("all", "large_pool", "small_pool")
_CUR, _PEAK, _ALLOC, _FREED = range(4)
METRICS = ("current", "peak", "allocated", "freed")


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


class HbmLedger:
    """Live bytes and allocation counts of one device, with peaks and running totals.

    The counters are the device's C++ library's (``cpp/neuron_memory.cpp``): fresh tensors made
    there are charged and released there; a storage made in Python (:meth:`charge`) is released by
    a weakref callback."""

    def __init__(self, index: int):
        from neuronsim.device import cpp

        self.index = index
        self._lib = cpp.load()
        self.handle = self._lib.neuronsim_ledger_new()  # what memory.py's allocations charge
        self._lock = threading.Lock()
        # id of each live weakref -> (the weakref, its bytes): by id, as a numpy array (what a
        # device storage may own) is unhashable, and so is a weakref to it
        self._live: dict[int, tuple[weakref.ref, int]] = {}
        self.num_ooms = 0

    def _table(self) -> tuple[list[list[int]], list[list[int]]]:
        """([pool][metric] bytes, [pool][metric] counts); pool 0 is "all"."""
        out = (ctypes.c_int64 * 24)()
        self._lib.neuronsim_ledger_read(self.handle, out)
        values = list(out)
        rows = [values[i:i + 4] for i in range(0, 24, 4)]
        return rows[:3], rows[3:]

    @property
    def allocated_bytes(self) -> int:
        return self._lib.neuronsim_ledger_current(self.handle)

    @property
    def peak_bytes(self) -> int:
        return self._table()[0][0][_PEAK]

    def check(self, nbytes: int) -> None:
        capacity = settings.hbm_capacity_bytes()
        allocated = self.allocated_bytes
        if allocated + nbytes > capacity:
            self.num_ooms += 1
            raise HbmCapacityError(self._oom_message(nbytes, allocated, capacity))

    def charge(self, storage, nbytes: int | None = None) -> None:
        """Charge a new storage made in Python, released when it dies (or the host array a new
        storage owns: it dies with the storage); ``nbytes``: its size, when the caller knows it."""
        if nbytes is None:
            nbytes = storage.nbytes()
        if nbytes == 0:
            return
        if not self._lib.neuronsim_ledger_charge(self.handle, nbytes, settings.hbm_capacity_bytes()):
            self.check(nbytes)  # raises; refused charges change nothing
        ref = weakref.ref(storage, self._release)
        with self._lock:
            self._live[id(ref)] = (ref, nbytes)

    def _release(self, ref: weakref.ref) -> None:
        with self._lock:
            found = self._live.pop(id(ref), None)
        if found is not None:
            self._lib.neuronsim_ledger_release(self.handle, found[1])

    def reset_peak(self) -> None:
        self._lib.neuronsim_ledger_reset_peak(self.handle)

    def reset_accumulated(self) -> None:
        self._lib.neuronsim_ledger_reset_accumulated(self.handle)
        self.num_ooms = 0

    def stats(self) -> dict[str, int]:
        """CUDA-style flat keys (``allocated_bytes.all.current`` ...), sorted like torch's.

        There is no caching allocator: every storage is its own segment, so reserved == allocated
        == active and nothing is inactive; TorchNeuron guarantees reserved >= allocated >= active.
        """
        byte_rows, count_rows = self._table()
        out: dict[str, int] = {}
        for p, pool in enumerate(POOLS):
            for m, metric in enumerate(METRICS):
                nbytes, count = byte_rows[p][m], count_rows[p][m]
                for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
                    out[f"{name}.{pool}.{metric}"] = nbytes
                for name in ("allocation", "segment", "active"):
                    out[f"{name}.{pool}.{metric}"] = count
                out[f"inactive_split.{pool}.{metric}"] = 0
                out[f"inactive_split_bytes.{pool}.{metric}"] = 0
        alloc_calls, free_calls = count_rows[0][_ALLOC], count_rows[0][_FREED]
        out.update(
            num_alloc_retries=0,
            num_ooms=self.num_ooms,
            num_sync_all_streams=0,
            num_device_alloc=alloc_calls,
            num_device_free=free_calls,
            max_split_size=-1,
            oversize_allocations=0,
            oversize_segments=0,
        )
        return dict(sorted(out.items()))

    def _oom_message(self, nbytes: int, allocated: int, capacity: int) -> str:
        free = max(capacity - allocated, 0)
        return (
            f"neuron:{self.index} out of memory. Tried to allocate {format_bytes(nbytes)} ({nbytes} bytes). "
            f"neuron:{self.index} has a total capacity of {format_bytes(capacity)} ({capacity} bytes) "
            f"of which {format_bytes(free)} ({free} bytes) is free; {format_bytes(allocated)} "
            f"({allocated} bytes) is allocated by tensors. This is the simulated HBM of one logical "
            f"NeuronCore of {settings.chip().name}; set {env.NEURON_SIM_HBM_BYTES} to change it."
        )


_ledgers: dict[int, HbmLedger] = {}
skip_dynamo(HbmLedger._release)  # a weakref callback: it runs inside whatever frame frees a storage
_ledgers_lock = threading.Lock()
# True once a second device index has a ledger: ops then check their tensors share one device.
several_devices = False


def ledger(index: int) -> HbmLedger:
    global several_devices
    found = _ledgers.get(index)
    if found is None:
        with _ledgers_lock:
            found = _ledgers.setdefault(index, HbmLedger(index))
            several_devices = len(_ledgers) > 1
    return found
