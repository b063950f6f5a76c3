"""On-chip allocation as the NKI compiler does it: by liveness, with rotating buffers.

Every on-chip :class:`Buffer` of a trace is live from the first to the last instruction that
touches it, wherever it was created: a tile held in a Python list stays live until its last use,
a tile of a finished loop iteration is free right after its last use. A linear scan in program
order places each buffer at the lowest address free for its whole live range (first fit), so
freed bytes are reused and the reuse creates the dependencies hardware would see (the scheduler
orders instructions that touch the same bytes).

Tiles created inside ``affine_range`` loops rotate over ``degree`` buffers (multi-buffering): the
buffer of iteration ``j`` is held until iteration ``j + degree - 1`` has started, so consecutive
iterations get different bytes and overlap on the engines. The degree starts at
:data:`MAX_ROTATION` and is lowered, separately for SBUF and PSUM, until everything fits. Tiles
start at partition 0; if SBUF does not fit so at any degree, tiles of <= 64 (<= 32) partitions may
also start at partition 64 (32, 64, 96), as SBUF addresses are (partition, byte) pairs. With no
rotation left, SBUF tiles are split, reloaded and spilled as the compiler does (``spill.py``) and
PSUM tiles whose accumulation is done move to SBUF (``psum_evict.py``); a kernel that still does
not fit raises a capacity error naming the tensor that could not be placed, its size, the limit,
what was live, and the kernel line that allocated it.

PSUM is allocated in whole 2 KiB banks (an accumulation group lives in one bank, S9); SBUF in
:data:`SBUF_ALIGN_BYTES` steps.
"""

from __future__ import annotations

import bisect
import heapq

from neuronsim.errors import PsumCapacityError, SbufCapacityError
from neuronsim.nki.buffer import Buffer
from neuronsim.nki.psum_evict import evict_to_sbuf
from neuronsim.nki.spill import SpillFailure, fit_by_splitting
from neuronsim.nki.trace import Trace
from neuronsim.sim.ir import Memory

MAX_ROTATION = 4  # deepest multi-buffering tried for affine_range tiles
# nl.tile_size.sbuf_min_align: not published (S29 lists the constant, third-party stubs give 16 bytes).
SBUF_ALIGN_BYTES = 16


class _Failure:
    def __init__(self, buf: Buffer, size: int, largest_gap: int, live: list[tuple[int, int, Buffer]]):
        self.buf = buf
        self.size = size
        self.largest_gap = largest_gap
        self.live = live


def allocate(trace: Trace) -> dict:
    """Set ``address`` on every on-chip root buffer the trace uses; return the rotation degree used
    per memory, and under ``"sbuf_reloads"`` how many reloads fitting SBUF took (if it took any)."""
    degrees = {}
    for memory in (Memory.PSUM, Memory.SBUF):  # SBUF last: fitting it may insert records
        bufs = [b for b in trace.buffers if b.memory is memory and b.alias_of is None and b.first >= 0]
        if not bufs:
            degrees[memory] = 0
            continue
        chip = trace.chip
        if memory is Memory.SBUF:
            unit, capacity = SBUF_ALIGN_BYTES, chip.sbuf_bytes_per_partition
        else:
            unit, capacity = chip.psum_bank_bytes_per_partition, chip.psum_bytes_per_partition
        failure = None
        for degree in range(MAX_ROTATION, 0, -1):
            failure = _linear_scan(bufs, degree, unit, capacity)
            if failure is None:
                degrees[memory] = degree
                break
        else:
            if memory is Memory.SBUF:
                degree = _fit_two_d(bufs, unit, capacity, chip.partitions)
                if degree:
                    degrees[memory] = degree
                    continue
            if any(b.pinned for b in bufs):
                raise _capacity_error(memory, failure, capacity, unit, chip)
            if memory is Memory.PSUM:
                try:
                    degrees["psum_evictions"] = evict_to_sbuf(trace, bufs, unit, capacity)
                except SpillFailure as f:
                    if not f.live:  # not rewritable (register loops): the first failure stands
                        raise _capacity_error(memory, failure, capacity, unit, chip) from None
                    held = _Failure(f.buf, f.size, _largest_gap(f.live, capacity), f.live)
                    raise _capacity_error(memory, held, capacity, unit, chip) from None
                degrees[memory] = 1
                continue
            try:
                degrees["sbuf_reloads"] = fit_by_splitting(trace, bufs, unit, capacity)
            except SpillFailure as f:
                busy = sorted(f.live, key=lambda a: a[0])
                raise _capacity_error(memory, _Failure(f.buf, f.size, _largest_gap(busy, capacity), busy),
                                      capacity, unit, chip) from None
            degrees[memory] = 1
    for b in trace.buffers:
        if b.alias_of is not None and b.alias_of.address is not None:
            b.address = b.alias_of.address
    return degrees


def _rounded(nbytes: int, unit: int) -> int:
    return max(unit, -(-nbytes // unit) * unit)


def _held_until(bufs: list[Buffer], degree: int) -> dict[int, int]:
    """Index of the last instruction each buffer's bytes are held for (live range + rotation)."""
    end = {b.id: b.last for b in bufs}
    if degree <= 1:
        return end
    by_site: dict = {}
    for b in bufs:
        if b.rotating:
            by_site.setdefault(b.site, []).append(b)
    for group in by_site.values():
        group.sort(key=lambda b: b.site_index)
        last = len(group) - 1
        for j, b in enumerate(group):
            end[b.id] = max(end[b.id], group[min(j + degree - 1, last)].first)
    return end


def _linear_scan(bufs: list[Buffer], degree: int, unit: int, capacity: int) -> _Failure | None:
    end = _held_until(bufs, degree)
    if any(b.pinned for b in bufs):
        return _linear_scan_pinned(bufs, end, unit, capacity)
    order = sorted(bufs, key=lambda b: (b.first, b.id))
    gaps: list[list[int]] = [[0, capacity]]  # free byte ranges [start, end), sorted and disjoint
    expiry: list[tuple[int, int, int, int]] = []  # heap of (held-until, id, address, size)
    live: dict[int, tuple[int, int, Buffer]] = {}
    for b in order:
        start = b.first
        while expiry and expiry[0][0] < start:
            _, bid, addr, size = heapq.heappop(expiry)
            del live[bid]
            _free(gaps, addr, addr + size)
        size = _rounded(b.bytes_per_partition, unit)
        for i, gap in enumerate(gaps):  # first fit
            if gap[1] - gap[0] >= size:
                placed = gap[0]
                if gap[1] - gap[0] == size:
                    del gaps[i]
                else:
                    gap[0] += size
                break
        else:
            busy = sorted(live.values(), key=lambda a: a[0])
            return _Failure(b, size, _largest_gap(busy, capacity), busy)
        b.address = (0, placed)
        live[b.id] = (placed, size, b)
        heapq.heappush(expiry, (end[b.id], b.id, placed, size))
    return None


def _start_partitions(partitions: int, total: int) -> range:
    """Where a tile of ``partitions`` may start: an access of P in (32, 64] partitions starts at 0
    or 64, of P <= 32 at a multiple of 32 (S9, enforced by sim/validate.py), so a tile placed at
    such an offset keeps every access that is legal at partition 0 legal."""
    step = total if partitions > 64 else 64 if partitions > 32 else 32
    return range(0, total - partitions + 1, step)


def _fit_two_d(bufs: list[Buffer], unit: int, capacity: int, total: int) -> int:
    """The rotation degree at which ``bufs`` fit when tiles of <= 64 partitions may also start at a
    higher partition (SBUF addresses are (partition, byte), as ``nl.ndarray(address=...)`` says):
    two [64, N] tiles live together then share bytes in partitions 0-63 and 64-127. Tried only
    when the 1-D scan fails, so kernels that fit as before keep their addresses. 0: no fit."""
    for degree in range(MAX_ROTATION, 0, -1):
        if _scan_two_d(bufs, _held_until(bufs, degree), unit, capacity, total) is None:
            return degree
    return 0


def _scan_two_d(
    bufs: list[Buffer], end: dict[int, int], unit: int, capacity: int, total: int
) -> Buffer | None:
    """First fit over (start partition, byte): the lowest start partition with a free byte range
    for the whole live range, the lowest address there. Returns the buffer that did not fit."""
    pinned = [b for b in bufs if b.pinned]
    order = sorted((b for b in bufs if not b.pinned), key=lambda b: (b.first, b.id))
    active: list[tuple[int, int, int, int, Buffer]] = []  # (partition, partitions, address, size, buffer)
    for b in order:
        start = b.first
        active = [a for a in active if end[a[4].id] >= start]
        busy = active + [
            (p.address[0], p.shape[0], p.address[1], _rounded(p.bytes_per_partition, unit), p)
            for p in pinned
            if p.first <= end[b.id] and end[p.id] >= start
        ]
        size, parts = _rounded(b.bytes_per_partition, unit), b.shape[0]
        for row in _start_partitions(parts, total):
            ranges = sorted((a[2], a[3]) for a in busy if a[0] < row + parts and row < a[0] + a[1])
            placed = 0
            for a_addr, a_size in ranges:
                if a_addr - placed >= size:
                    break
                placed = max(placed, a_addr + a_size)
            if capacity - placed >= size:
                break
        else:
            return b
        b.address = (row, placed)
        active.append((row, parts, placed, size, b))
    return None


def _free(gaps: list[list[int]], lo: int, hi: int) -> None:
    i = bisect.bisect_left(gaps, [lo, hi])
    if i > 0 and gaps[i - 1][1] == lo:
        gaps[i - 1][1] = hi
        if i < len(gaps) and gaps[i][0] == hi:
            gaps[i - 1][1] = gaps[i][1]
            del gaps[i]
    elif i < len(gaps) and gaps[i][0] == hi:
        gaps[i][0] = lo
    else:
        gaps.insert(i, [lo, hi])


def _linear_scan_pinned(bufs: list[Buffer], end: dict[int, int], unit: int, capacity: int) -> _Failure | None:
    """The same scan when some buffers are pinned by the kernel (``address=``): place around them."""
    pinned = [b for b in bufs if b.pinned]
    order = sorted((b for b in bufs if not b.pinned), key=lambda b: (b.first, b.id))
    active: list[tuple[int, int, Buffer]] = []  # (address, size, buffer), sorted by address
    for b in order:
        start = b.first
        active = [a for a in active if end[a[2].id] >= start]
        size = _rounded(b.bytes_per_partition, unit)
        busy = sorted(
            active
            + [
                (p.address[1], _rounded(p.bytes_per_partition, unit), p)
                for p in pinned
                if p.first <= end[b.id] and end[p.id] >= start
            ],
            key=lambda a: a[0],
        )
        placed = 0
        for a_addr, a_size, _ in busy:
            if a_addr - placed >= size:
                break
            placed = max(placed, a_addr + a_size)
        else:
            if capacity - placed < size:
                return _Failure(b, size, _largest_gap(busy, capacity), busy)
        b.address = (0, placed)
        bisect.insort(active, (placed, size, b), key=lambda a: a[0])
    return None


def _largest_gap(busy: list[tuple[int, int, Buffer]], capacity: int) -> int:
    largest, addr = 0, 0
    for a_addr, a_size, _ in busy:
        largest = max(largest, a_addr - addr)
        addr = max(addr, a_addr + a_size)
    return max(largest, capacity - addr)


def _capacity_error(memory: Memory, f: _Failure, capacity: int, unit: int, chip) -> Exception:
    b = f.buf
    holders = sorted(f.live, key=lambda a: -a[1])
    held = sum(a[1] for a in holders)
    shown = ", ".join(f"'{a[2].name}' ({a[1]} B, {a[2].location})" for a in holders[:5])
    if len(holders) > 5:
        shown += f" and {len(holders) - 5} more"
    if memory is Memory.SBUF:
        what = (
            f"{b.describe()} needs {b.bytes_per_partition} bytes per partition but an SBUF partition has "
            f"{capacity} usable bytes ({chip.name}); while it is live, {held} bytes per partition are held "
            f"by {len(holders)} other tensors and the largest free range is {f.largest_gap} bytes"
        )
        cls = SbufCapacityError
    else:
        banks = f.size // unit
        what = (
            f"{b.describe()} needs {banks} PSUM bank(s) of {unit} bytes per partition but PSUM has "
            f"{chip.psum_banks} banks ({capacity} bytes per partition); while it is live, "
            f"{held // unit} banks are held by {len(holders)} other tensors"
        )
        cls = PsumCapacityError
    if shown:
        what += f": {shown}"
    return cls(what, instruction=f"allocation of '{b.name}'", location=b.location)
