"""Two profiles side by side: summary fields, engines and ops, with their deltas (B relative to A).

Typically one script on two chips (``neuronsim profile --chip trn2,trn3``) or before and after a
change. ``delta`` is B - A; ``ratio`` is B / A (below 1: B took less), None when A is zero. Ops are
matched by (name, kind); an op only one side ran has zeros on the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from neuronsim.profiler.breakdown import ENGINE_KEYS

COMPARE_SCHEMA = "neuronsim-compare/1"
# (field, how to show it): time in seconds, bytes, percent, or a plain number
SUMMARY_FIELDS = (
    ("total_time", "time"), ("mfu_estimated_percent", "percent"), ("hfu_estimated_percent", "percent"),
    ("model_flops", "number"), ("kernel_count", "number"), ("instruction_count", "number"),
    ("kernel_launch_time", "time"),
    ("tensor_engine_active_time_percent", "percent"), ("vector_engine_active_time_percent", "percent"),
    ("scalar_engine_active_time_percent", "percent"), ("gpsimd_engine_active_time_percent", "percent"),
    ("dma_active_time_percent", "percent"),
    ("hbm_read_bytes", "bytes"), ("hbm_write_bytes", "bytes"), ("dma_transfer_count", "number"),
    ("dma_transfer_average_bytes", "bytes"), ("host_fallback_time", "time"),
    ("host_fallback_count", "number"),
    ("host_transfer_time", "time"), ("sbuf_peak_bytes", "bytes"), ("psum_peak_bytes", "bytes"),
)
FIELD_KIND = dict(SUMMARY_FIELDS)


def _delta(a: float, b: float) -> dict:
    return {"a": a, "b": b, "delta": b - a, "ratio": (b / a) if a else None}


def _engine_time(doc: Mapping, engine: str) -> float:
    return float(doc.get("dma_active_time" if engine == "dma" else f"{engine}_engine_active_time", 0.0))


def compare_profiles(a: Mapping, b: Mapping, names: tuple[str, str] = ("A", "B"),
                     sources: tuple[str, str] = ("", "")) -> dict:
    """The comparison document (``--json`` prints it; the terminal and HTML render it)."""
    summary = [{"field": f, "kind": kind, **_delta(float(a.get(f, 0) or 0), float(b.get(f, 0) or 0))}
               for f, kind in SUMMARY_FIELDS]
    engines = []
    for e in ENGINE_KEYS:
        row = {"engine": e, **_delta(_engine_time(a, e), _engine_time(b, e))}
        pct = "dma_active_time_percent" if e == "dma" else f"{e}_engine_active_time_percent"
        row["a_percent"], row["b_percent"] = float(a.get(pct, 0.0)), float(b.get(pct, 0.0))
        engines.append(row)
    ops_a = {(r["name"], r["kind"]): r for r in a.get("ops", [])}
    ops_b = {(r["name"], r["kind"]): r for r in b.get("ops", [])}
    ops = []
    for key in dict.fromkeys([*ops_a, *ops_b]):
        ra, rb = ops_a.get(key, {}), ops_b.get(key, {})
        ops.append({"name": key[0], "kind": key[1], "a_count": int(ra.get("count", 0)),
                    "b_count": int(rb.get("count", 0)),
                    **_delta(float(ra.get("total_time", 0.0)), float(rb.get("total_time", 0.0)))})
    ops.sort(key=lambda r: (-abs(r["delta"]), r["name"], r["kind"]))
    return {
        "schema": COMPARE_SCHEMA,
        "a": {"name": names[0], "chip": a.get("chip"), "detail": a.get("detail"), "source": sources[0]},
        "b": {"name": names[1], "chip": b.get("chip"), "detail": b.get("detail"), "source": sources[1]},
        "summary": summary,
        "engines": engines,
        "ops": ops,
        "recommendations": {"a": [r.get("id") for r in a.get("recommendations", [])],
                            "b": [r.get("id") for r in b.get("recommendations", [])]},
    }


def side_names(a: Mapping, b: Mapping, dir_a: str, dir_b: str) -> tuple[str, str]:
    """How to call the two sides: their chips when they differ, else their directories."""
    if a.get("chip") and b.get("chip") and a.get("chip") != b.get("chip"):
        return str(a["chip"]), str(b["chip"])
    na, nb = Path(dir_a).name or str(dir_a), Path(dir_b).name or str(dir_b)
    if na == nb:
        na, nb = str(dir_a), str(dir_b)
    return na, nb


def write_comparison(path: str | Path, comparison: Mapping) -> None:
    Path(path).write_text(json.dumps(comparison, indent=1) + "\n")
