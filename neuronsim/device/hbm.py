"""Simulated HBM of each logical NeuronCore: capacity, live bytes, CUDA-style statistics, OOM.

Device tensors live in host memory, so HBM is enforced by accounting: every neuron storage is
charged when it is made and released by a weakref callback when its StorageImpl dies (torch keeps
a storage's Python object alive exactly as long as the StorageImpl). A charge that would pass the
capacity raises :class:`~neuronsim.errors.HbmCapacityError` before anything changes, so every
tensor allocated before it is intact.
"""

from __future__ import annotations

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
    """Live bytes and allocation counts of one device, with peaks and running totals."""

    def __init__(self, index: int):
        self.index = index
        self._lock = threading.RLock()  # re-entrant: a GC-triggered release can run while charging
        # id of each live weakref -> (the weakref, its bytes): by id, as a numpy array (what a
        # fresh device tensor's storage owns, memory.py) is unhashable, and so is a weakref to it
        self._live: dict[int, tuple[weakref.ref, int]] = {}
        # [pool][metric] for bytes and for allocation counts; pool 0 is "all".
        self._bytes = [[0, 0, 0, 0] for _ in POOLS]
        self._count = [[0, 0, 0, 0] for _ in POOLS]
        self.num_ooms = 0

    @property
    def allocated_bytes(self) -> int:
        return self._bytes[0][_CUR]

    @property
    def peak_bytes(self) -> int:
        return self._bytes[0][_PEAK]

    def check(self, nbytes: int) -> None:
        capacity = settings.hbm_capacity_bytes()
        allocated = self._bytes[0][_CUR]
        if allocated + nbytes > capacity:
            self.num_ooms += 1
            raise HbmCapacityError(self._oom_message(nbytes, allocated, capacity))

    def charge(self, storage, nbytes: int | None = None) -> None:
        """Charge a new storage, released when it dies (or the host array a new storage owns: it
        dies with the storage); ``nbytes``: its size, when the caller knows it."""
        if nbytes is None:
            nbytes = storage.nbytes()
        if nbytes == 0:
            return
        # Every device allocation runs this (a cached native op's outputs too): the four rows it
        # moves are spelled out, no loop over tuples made per call.
        all_bytes, all_count = self._bytes[0], self._count[0]
        if nbytes >= LARGE_POOL_MIN_BYTES:
            pool_bytes, pool_count = self._bytes[1], self._count[1]
        else:
            pool_bytes, pool_count = self._bytes[2], self._count[2]
        with self._lock:
            self.check(nbytes)
            ref = weakref.ref(storage, self._release)
            self._live[id(ref)] = (ref, nbytes)
            cur = all_bytes[_CUR] = all_bytes[_CUR] + nbytes
            all_bytes[_ALLOC] += nbytes
            if cur > all_bytes[_PEAK]:
                all_bytes[_PEAK] = cur
            cur = pool_bytes[_CUR] = pool_bytes[_CUR] + nbytes
            pool_bytes[_ALLOC] += nbytes
            if cur > pool_bytes[_PEAK]:
                pool_bytes[_PEAK] = cur
            cur = all_count[_CUR] = all_count[_CUR] + 1
            all_count[_ALLOC] += 1
            if cur > all_count[_PEAK]:
                all_count[_PEAK] = cur
            cur = pool_count[_CUR] = pool_count[_CUR] + 1
            pool_count[_ALLOC] += 1
            if cur > pool_count[_PEAK]:
                pool_count[_PEAK] = cur

    def _release(self, ref: weakref.ref) -> None:
        with self._lock:
            found = self._live.pop(id(ref), None)
            if found is None:
                return
            nbytes = found[1]
            pool = 1 if nbytes >= LARGE_POOL_MIN_BYTES else 2
            row = self._bytes[0]
            row[_CUR] -= nbytes
            row[_FREED] += nbytes
            row = self._bytes[pool]
            row[_CUR] -= nbytes
            row[_FREED] += nbytes
            row = self._count[0]
            row[_CUR] -= 1
            row[_FREED] += 1
            row = self._count[pool]
            row[_CUR] -= 1
            row[_FREED] += 1

    def reset_peak(self) -> None:
        with self._lock:
            for table in (self._bytes, self._count):
                for row in table:
                    row[_PEAK] = row[_CUR]

    def reset_accumulated(self) -> None:
        with self._lock:
            for table in (self._bytes, self._count):
                for row in table:
                    row[_ALLOC] = row[_FREED] = 0
            self.num_ooms = 0

    def stats(self) -> dict[str, int]:
        """CUDA-style flat keys (``allocated_bytes.all.current`` ...), sorted like torch's.

        There is no caching allocator: every storage is its own segment, so reserved == allocated
        == active and nothing is inactive; TorchNeuron guarantees reserved >= allocated >= active.
        """
        with self._lock:
            out: dict[str, int] = {}
            for p, pool in enumerate(POOLS):
                for m, metric in enumerate(METRICS):
                    nbytes, count = self._bytes[p][m], self._count[p][m]
                    for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
                        out[f"{name}.{pool}.{metric}"] = nbytes
                    for name in ("allocation", "segment", "active"):
                        out[f"{name}.{pool}.{metric}"] = count
                    out[f"inactive_split.{pool}.{metric}"] = 0
                    out[f"inactive_split_bytes.{pool}.{metric}"] = 0
            alloc_calls, free_calls = self._count[0][_ALLOC], self._count[0][_FREED]
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
