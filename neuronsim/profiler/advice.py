"""Recommendations, as Neuron Explorer's insight cards: what limits the run, and the ops behind it.

Each recommendation is ``{"id", "title", "detail", "ops"}``; ``ops`` lists the ops (or, in a single
kernel's profile, the opcodes and kernel lines) that triggered it, worst first, each
``{"name", "kind", "detail"}``. Op rows are summary.json's ``ops`` (with the engine and DMA
figures of :mod:`neuronsim.profiler.breakdown` where known).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from neuronsim.profiler.breakdown import SMALL_DMA_BYTES
from neuronsim.profiler.units import fmt_time

# Thresholds. Explorer's "average DMA size" target is >= 32 KiB (breakdown.SMALL_DMA_BYTES).
DMA_BOUND_PERCENT = 60.0
FALLBACK_DOMINANT_PERCENT = 30.0
TENSOR_IDLE_PERCENT = 10.0
TOP_OPS = 5
COMPUTE = ("tensor", "vector", "scalar", "gpsimd")


def _op(r: Mapping, detail: str) -> dict:
    return {"name": str(r.get("name")), "kind": str(r.get("kind")), "detail": detail}


def _engines(r: Mapping) -> Mapping[str, float]:
    return r.get("engine_active_time") or {}


def _dma_bound_ops(ops: Sequence[Mapping]) -> list[dict]:
    rows = []
    for r in ops:
        eng = _engines(r)
        if eng:
            busiest = max(COMPUTE, key=lambda e: eng.get(e, 0.0))
            if eng.get("dma", 0.0) > eng.get(busiest, 0.0):
                rows.append((eng["dma"], r, f"DMA {fmt_time(eng['dma'])}, {busiest} "
                                            f"{fmt_time(eng.get(busiest, 0.0))}"))
        elif r.get("kind") == "dma":  # a kernel's opcode row
            rows.append((r.get("total_time", 0.0), r, f"{r.get('count', 0)} transfers, "
                                                         f"{fmt_time(r.get('total_time', 0.0))}"))
    rows.sort(key=lambda x: -x[0])
    return [_op(r, why) for _, r, why in rows[:TOP_OPS]]


def _small_dma_ops(ops: Sequence[Mapping], locations: Mapping[str, int]) -> list[dict]:
    rows = [(r.get("dma_small_transfer_count", 0), r) for r in ops if r.get("dma_small_transfer_count")]
    rows.sort(key=lambda x: -x[0])
    out = []
    for n, r in rows[:TOP_OPS]:
        where = list(r.get("dma_small_transfer_locations", {}).items())[:2]
        lines = ", ".join(f"{loc} ×{k}" for loc, k in where)
        out.append(_op(r, f"{n} of {r.get('dma_transfer_count', n)} transfers below "
                          f"{SMALL_DMA_BYTES // 1024} KiB" + (f" ({lines})" if lines else "")))
    if not out:  # a kernel's profile: the kernel lines that issued them
        for loc, n in list(locations.items())[:TOP_OPS]:
            out.append({"name": loc, "kind": "source line", "detail": f"{n} transfers below "
                                                                     f"{SMALL_DMA_BYTES // 1024} KiB"})
    return out


def _fallback_ops(ops: Sequence[Mapping]) -> list[dict]:
    rows = sorted((r for r in ops if r.get("kind") == "fallback"), key=lambda r: -r.get("total_time", 0.0))
    return [_op(r, f"{r.get('count', 0)} calls, {fmt_time(r.get('total_time', 0.0))} "
                   f"({r.get('total_time_percent', 0.0):.1f}%)") for r in rows[:TOP_OPS]]


def _tensor_idle_ops(ops: Sequence[Mapping]) -> list[dict]:
    """The longest native ops that leave TensorE idle most of their time."""
    rows = []
    for r in ops:
        eng, total = _engines(r), r.get("total_time", 0.0)
        if eng and total > 0 and r.get("kind") in ("kernel", "nki.simulate"):
            share = 100.0 * eng.get("tensor", 0.0) / total
            if share < TENSOR_IDLE_PERCENT:
                rows.append((total, r, f"{fmt_time(total)}, TensorE {share:.0f}% of it"))
    rows.sort(key=lambda x: -x[0])
    return [_op(r, why) for _, r, why in rows[:TOP_OPS]]


def recommendations(s: Mapping, ops: Sequence[Mapping] = (),
                    small_dma_locations: Mapping[str, int] | None = None) -> list[dict]:
    """Explorer-style insight cards from a summary: DMA-bound, small DMAs, host fallbacks, TensorE idle."""
    out = []
    compute = {e: s.get(f"{e}_engine_active_time_percent", 0.0) for e in COMPUTE}
    busiest = max(compute, key=compute.get)
    dma = s.get("dma_active_time_percent", 0.0)
    if dma >= DMA_BOUND_PERCENT and dma > compute[busiest]:
        out.append({"id": "dma_bound", "title": "DMA-bound",
                    "detail": f"DMA queues were active {dma:.0f}% of the time; the busiest compute engine "
                              f"({busiest}) {compute[busiest]:.0f}%. Overlap loads with compute (double "
                              f"buffering) and keep data in SBUF across uses.",
                    "ops": _dma_bound_ops(ops)})
    count, avg = s.get("dma_transfer_count", 0), s.get("dma_transfer_average_bytes", 0.0)
    if count and avg < SMALL_DMA_BYTES:
        out.append({"id": "small_dma", "title": "Small DMA transfers",
                    "detail": f"{count} transfers averaging {avg:,.0f} bytes; below "
                              f"{SMALL_DMA_BYTES // 1024} KiB the fixed cost per transfer dominates. Move "
                              f"larger tiles per dma_copy.",
                    "ops": _small_dma_ops(ops, small_dma_locations or {})})
    fb = s.get("host_fallback_time_percent", 0.0)
    if fb >= FALLBACK_DOMINANT_PERCENT:
        top = ", ".join(list(s.get("fallback_ops", {}))[:5])
        out.append({"id": "host_fallbacks", "title": "Host fallbacks dominate",
                    "detail": f"Ops computed on the host took {fb:.0f}% of device time "
                              f"({s.get('host_fallback_count', 0)} calls{': ' + top if top else ''}). "
                              f"Each pays a launch and a host round trip.",
                    "ops": _fallback_ops(ops)})
    tensor = compute["tensor"]
    if s.get("total_time", 0.0) > 0 and tensor < TENSOR_IDLE_PERCENT:
        why = f"it was active {tensor:.1f}% of the time" if s.get("model_flops") else "no matmul ran on it"
        out.append({"id": "tensor_idle", "title": "TensorE idle",
                    "detail": f"TensorE did little: {why} (MFU {s.get('mfu_estimated_percent', 0.0):.2f}%).",
                    "ops": _tensor_idle_ops(ops)})
    return out
