"""NKI releases, and every behaviour neuronsim simulates differently by release.

A kernel is written against one NKI release; where AWS changed what an API computes between
releases, neuronsim simulates the release selected by ``nki_version`` (``NEURON_SIM_NKI_VERSION``,
``nki.simulate(kernel, nki_version=...)``, ``python -m neuronsim.nki.compat --nki-version``), by
default the current one. Each such behaviour is one field of :class:`NkiRelease` below, with the
release note that changed it. Fixes AWS made to its own CPU simulator (``nki.simulate``) are not
listed: the hardware did not change, and neuronsim models the hardware.

This module imports nothing from neuronsim (``options`` validates against it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NkiRelease:
    version: str  # "0.6"
    neuron_sdk: str  # the Neuron SDK release that introduced it
    released: str  # its date of release (ISO), from the SDK's NKI release notes

    # nisa.quantize_mx's block scale X for a group with largest magnitude amax and element Emax
    # (8 e4m3fn, 15 e5m2). True: the OCP Microscaling spec's sample conversion,
    # X = 2^(floor(log2 amax) - Emax), values saturating at the element's largest. False: twice
    # that, X = 2^(floor(log2 amax) - (Emax - 1)). Source: NKI 0.5.0 release notes (Neuron 2.31.0),
    # Improvements: "nki.isa.quantize_mx now uses a block scale two times larger than the sample
    # conversion algorithm described in the OCP Microscaling specification"; the 0.4 API docs give
    # the OCP scale, the 0.5 and 0.6 ones the doubled scale.
    quantize_mx_ocp_scale: bool


# Release dates: release-notes/components/nki.rst of aws-neuron/aws-neuron-sdk.
RELEASES: dict[str, NkiRelease] = {r.version: r for r in (
    NkiRelease("0.3", "2.29.0", "2026-04-09", quantize_mx_ocp_scale=True),
    NkiRelease("0.4", "2.30.0", "2026-05-21", quantize_mx_ocp_scale=True),
    NkiRelease("0.5", "2.31.0", "2026-07-07", quantize_mx_ocp_scale=False),
    NkiRelease("0.6", "2.32.0", "2026-08-17", quantize_mx_ocp_scale=False),
)}
CURRENT = "0.6"


def normalize(version: str) -> str:
    """``"0.4"``, ``"0.4.0"`` -> ``"0.4"``; raises ``ValueError`` naming the known releases."""
    text = str(version).strip()
    if text.count(".") == 2 and text.endswith(".0"):
        text = text[:-2]
    if text not in RELEASES:
        raise ValueError(f"NKI release {version!r} is not one neuronsim simulates; known: "
                         f"{', '.join(RELEASES)} (the current one: {CURRENT})")
    return text


def release(version: str) -> NkiRelease:
    return RELEASES[normalize(version)]
