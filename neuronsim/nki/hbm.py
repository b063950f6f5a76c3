"""What a kernel launch asks of HBM, checked before anything is allocated.

On the chip, a kernel's HBM tensors (its arguments, ``shared_hbm`` outputs and scratch, and each
SPMD instance's ``private_hbm``) must fit the logical core's HBM; the simulator holds them all in
host memory. :func:`check_chip` rejects a launch the chip would reject (``HbmCapacityError``, at
trace time, naming the largest tensor and its line); :func:`check_host` rejects one the chip would
hold but this host cannot (``CapacityError``, before the arrays are made), so an oversized kernel
fails with a message instead of exhausting the machine.
"""

from __future__ import annotations

from neuronsim.errors import CapacityError, HbmCapacityError
from neuronsim.nki.buffer import Buffer
from neuronsim.options import current as current_options
from neuronsim.sim.chips import ChipSpec

# Host memory the simulator keeps free for itself (Python, Numba, schedules) when it checks that
# a launch's HBM arrays fit: a host-side allowance, not a chip figure.
HOST_RESERVE_BYTES = 512 << 20


def nbytes(b: Buffer) -> int:
    return b.size * b.dtype.itemsize


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def capacity(chip: ChipSpec) -> int:
    """The HBM of one logical core (``hbm_bytes`` option, or the chip's share per logical core)."""
    opts = current_options()
    return opts.hbm_bytes if opts.hbm_bytes is not None else chip.hbm_bytes_per_logical_core


def private(trace) -> list[Buffer]:
    """An instance's own HBM buffers (``private_hbm`` scratch)."""
    return [b for b in trace.hbm_buffers if b.kind == "scratch" and not b.shared and b.alias_of is None]


def check_chip(name: str, first, privates: list[list[Buffer]], chip: ChipSpec) -> int:
    """Raise ``HbmCapacityError`` if the HBM tensors of a launch — those of its ``first`` instance's
    trace shared by all (arguments, ``shared_hbm``, constants) and each instance's ``privates`` —
    exceed the logical core's HBM; return their bytes."""
    buffers = [b for b in first.hbm_buffers if (b.shared or b.kind != "scratch") and b.alias_of is None]
    buffers += [b for p in privates for b in p]
    total = sum(nbytes(b) for b in buffers)
    limit = capacity(chip)
    if total <= limit:
        return total
    big = max(buffers, key=nbytes)
    raise HbmCapacityError(
        f"kernel {name}: its HBM tensors need {_gib(total)} ({len(buffers)} tensors; the largest, "
        f"{big.describe()}, {_gib(nbytes(big))}); a logical core of {chip.name} has {_gib(limit)} of HBM",
        instruction=f"allocation of '{big.name}'", location=big.location)


def host_available_bytes() -> int | None:
    """Memory this host can still give (Linux ``MemAvailable``), or None where it is not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host(name: str, need: int, location: str | None = None) -> None:
    """Raise ``CapacityError`` if making ``need`` bytes of HBM arrays would exhaust this host. A launch
    needing less than the reserve itself is never refused: it cannot be what exhausts the host (on a
    busy host with little ``MemAvailable`` a kilobyte kernel would otherwise fail)."""
    avail = host_available_bytes()
    if avail is None or need <= HOST_RESERVE_BYTES or need + HOST_RESERVE_BYTES <= avail:
        return
    raise CapacityError(
        f"kernel {name}: its launch needs {_gib(need)} of host memory for the simulated HBM tensors "
        f"it creates, and this host has {_gib(avail)} available (it fits the chip's HBM; run it on a "
        f"host with more memory, or with smaller shapes)", location=location)
