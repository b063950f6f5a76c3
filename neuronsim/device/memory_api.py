"""``torch.neuron`` memory functions over the simulated HBM ledger of each logical core."""

from __future__ import annotations

import collections

from neuronsim.device import hbm, settings, state


def _ledger(device) -> hbm.HbmLedger:
    return hbm.ledger(state.device_index(device))


def memory_stats(device=None) -> collections.OrderedDict:
    return collections.OrderedDict(_ledger(device).stats())


def memory_allocated(device=None) -> int:
    return _ledger(device).allocated_bytes


def max_memory_allocated(device=None) -> int:
    return _ledger(device).peak_bytes


def memory_reserved(device=None) -> int:
    # No caching allocator: every storage is released when it dies, so reserved == allocated.
    return _ledger(device).allocated_bytes


def max_memory_reserved(device=None) -> int:
    return _ledger(device).peak_bytes


def reset_peak_memory_stats(device=None) -> None:
    _ledger(device).reset_peak()


def reset_accumulated_memory_stats(device=None) -> None:
    _ledger(device).reset_accumulated()


def empty_cache() -> None:
    """Nothing is cached: freed device storages go straight back to the simulated HBM."""


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) simulated HBM bytes."""
    total = settings.hbm_capacity_bytes()
    return max(total - memory_allocated(device), 0), total


def memory_summary(device=None, abbreviated: bool = False) -> str:
    index = state.device_index(device)
    stats = hbm.ledger(index).stats()
    free, total = mem_get_info(index)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Allocations", "allocation", False),
    ]
    width = 75
    lines = [
        "=" * width,
        f" Neuron Memory Summary, Device {index} ({settings.chip().name}, simulated HBM)".ljust(width),
        "-" * width,
        f" {'Metric':<24}{'Cur Usage':>12}{'Peak Usage':>13}{'Tot Alloc':>13}{'Tot Freed':>13}",
        "-" * width,
    ]
    pools = ("all",) if abbreviated else hbm.POOLS
    for label, key, is_bytes in rows:
        for pool in pools:
            cells = [stats[f"{key}.{pool}.{m}"] for m in hbm.METRICS]
            shown = [hbm.format_bytes(c) if is_bytes else str(c) for c in cells]
            name = label if pool == "all" else f"  from {pool.replace('_', ' ')}"
            lines.append(f" {name:<24}{shown[0]:>12}{shown[1]:>13}{shown[2]:>13}{shown[3]:>13}")
    lines += [
        "-" * width,
        f" HBM capacity {hbm.format_bytes(total)}, free {hbm.format_bytes(free)}, OOMs {stats['num_ooms']}",
        "=" * width,
    ]
    return "\n".join(lines) + "\n"
