"""Shared by the NKI examples: run a kernel on trn2 and trn3 and print its simulated profile."""

from __future__ import annotations

import numpy as np

import neuronsim.nki as nki

CHIPS = ("trn2", "trn3")
FIELDS = (
    ("tensor", "tensor_engine_active_time_percent"),
    ("vector", "vector_engine_active_time_percent"),
    ("scalar", "scalar_engine_active_time_percent"),
    ("gpsimd", "gpsimd_engine_active_time_percent"),
    ("dma", "dma_active_time_percent"),
)


def profile_on(kernel, args, chip: str):
    """(outputs, profile) of ``kernel(*args)`` simulated on ``chip``."""
    return nki.simulate(kernel, profile=True, chip=chip)(*args)


def report(title: str, kernel, args, reference: np.ndarray | None = None) -> dict:
    """Run on every chip, check against ``reference``, print time / utilization / MFU; return profiles."""
    profiles = {}
    for chip in CHIPS:
        out, prof = profile_on(kernel, args, chip)
        s = prof.summary
        line = ", ".join(f"{name} {s[field]:.0f}%" for name, field in FIELDS)
        err = ""
        if reference is not None:
            err = f", max |err| {np.max(np.abs(out.astype(np.float32) - reference)):.2e}"
        mfu, hbm = s["mfu_estimated_percent"], s["hbm_read_bytes"] / 2**20
        us = s["total_time"] * 1e6
        print(f"{title} on {chip}: {us:.2f} us ({line}; MFU {mfu:.1f}%, HBM read {hbm:.2f} MiB{err})")
        profiles[chip] = prof
    return profiles
