"""The fidelity ruler: simulated vs published Trainium2 hardware figures, per figure and as a MAPE.

    python benchmarks/fidelity/run.py                 # every figure (5-15 minutes)
    python benchmarks/fidelity/run.py --only dma      # kernels whose name contains "dma"
    python benchmarks/fidelity/run.py --json          # the table as JSON

Each published kernel (``optimization_guide.py``, ``dma_overview.py``) is traced, allocated and
scheduled on trn2 with :func:`neuronsim.nki.timing.profile_timing`'s path: timing only, no values
(the schedule is data-independent; the guide's fp32 [4096, 8192] x [8192, 8192] matmuls would take
hours to compute on a CPU). Figures and their sources: ``figures.py``. The error is
``(simulated - hardware) / hardware``; the MAPE is the mean of its absolute values over the figures
measured. A kernel that fails (e.g. a capacity error) leaves its figures unmeasured, and the
ruler says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dma_overview  # noqa: E402
import optimization_guide  # noqa: E402
from figures import FIGURES, Figure  # noqa: E402

from neuronsim.errors import NeuronSimError  # noqa: E402
from neuronsim.nki import profile as nki_profile  # noqa: E402
from neuronsim.nki.timing import scheduled_runs  # noqa: E402
from neuronsim.sim.ir import Opcode  # noqa: E402

CHIP = "trn2"
SUMMARY_FIELDS = {
    "total": "total_time",
    "dma_active": "dma_active_time",
    "tensor_active": "tensor_engine_active_time",
    "vector_active": "vector_engine_active_time",
}


def _kernel_call(name: str):
    if name in optimization_guide.VERSIONS:
        g = optimization_guide
        args = (np.empty((g.K, g.M), np.float32), np.empty((g.K, g.N), np.float32))
        return optimization_guide.VERSIONS[name], args
    import ml_dtypes

    shape = dma_overview.SHAPES[name.removeprefix("dma_")]
    return dma_overview.load_exp_store, (np.empty(shape, ml_dtypes.bfloat16),)


def _field(timeline, name: str, i: int, fallback: float) -> float:
    """``timeline.<name>[i]``, or ``fallback`` on a simulator that does not record it."""
    values = getattr(timeline, name, None)
    return fallback if values is None else float(values[i])


def _instruction_measures(run) -> dict[str, float]:
    """The DMA-overview measures of one load -> activation -> store run (see figures.py)."""
    tl, program = run.timeline, run.prepared.program
    opcodes = [ins.opcode for ins in program.instructions]
    dmas = [i for i, op in enumerate(opcodes) if op is Opcode.DMA_COPY]
    out: dict[str, float] = {}
    for role, i in (("load", dmas[0]), ("store", dmas[-1])):
        start, end = float(tl.start_ns[i]), float(tl.end_ns[i])
        out[f"{role}_transfer"] = end - start
        out[f"{role}_piece"] = _field(tl, "dma_piece_ns", i, end - start)
        out[f"{role}_trigger_to_done"] = end - _field(tl, "issue_ns", i, start)
    act = opcodes.index(Opcode.ACTIVATION)
    out["exp"] = _field(tl, "done_ns", act, float(tl.end_ns[act])) - float(tl.start_ns[act])
    pre_start = _field(tl, "pre_start_ns", act, np.nan)
    out["act_table_load"] = 0.0 if np.isnan(pre_start) else _field(tl, "pre_done_ns", act, np.nan) - pre_start
    return out


def measure(kernel_name: str) -> dict:
    """Simulated values of every measure for one kernel (timing only), and the seconds it took."""
    kernel, args = _kernel_call(kernel_name)
    t0 = time.perf_counter()
    traced = kernel.specialize(args, {}, chip=CHIP)
    runs = scheduled_runs(traced)
    summary = nki_profile.build_profile(traced, runs).summary
    values = {m: summary[f] * 1e9 for m, f in SUMMARY_FIELDS.items()}
    if kernel_name.startswith("dma_"):
        values.update(_instruction_measures(runs[0][0]))
    return {"values": values, "seconds": time.perf_counter() - t0, "instructions": traced.instructions}


def compare(only: str | None = None) -> dict:
    figures = [f for f in FIGURES if only is None or only in f.kernel]
    kernels = list(dict.fromkeys(f.kernel for f in figures))
    results, failures, seconds = {}, {}, {}
    for name in kernels:
        try:
            r = measure(name)
        except NeuronSimError as exc:
            failures[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            continue
        results[name] = r["values"]
        seconds[name] = r["seconds"]
    rows = []
    for f in figures:
        row = {"kernel": f.kernel, "measure": f.measure, "hardware_ns": f.hardware_ns, "page": f.page,
               "source": _source(f)}
        if f.kernel in results:
            sim = results[f.kernel][f.measure]
            row.update(simulated_ns=sim, error=(sim - f.hardware_ns) / f.hardware_ns)
        else:
            row.update(simulated_ns=None, error=None, failure=failures[f.kernel])
        rows.append(row)
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    by_page = {}
    for page in dict.fromkeys(r["page"] for r in rows):
        page_errors = [abs(r["error"]) for r in rows if r["page"] == page and r["error"] is not None]
        by_page[page] = (float(np.mean(page_errors)) if page_errors else None, len(page_errors))
    return {
        "chip": CHIP,
        "rows": rows,
        "mape": float(np.mean(errors)) if errors else None,
        "mape_by_page": by_page,
        "measured": len(errors),
        "figures": len(rows),
        "seconds": seconds,
    }


def _source(f: Figure) -> str:
    return f"{f.image} ({f.read})"


def _fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:.2f} ms" if ns >= 1e5 else f"{ns:.0f} ns"


def print_table(result: dict) -> None:
    print(f"{'kernel':<12} {'measure':<22} {'hardware':>10} {'simulated':>10} {'error':>8}")
    for r in result["rows"]:
        err = "-" if r["error"] is None else f"{100 * r['error']:+.1f}%"
        print(f"{r['kernel']:<12} {r['measure']:<22} {_fmt_ns(r['hardware_ns']):>10} "
              f"{_fmt_ns(r['simulated_ns']):>10} {err:>8}")
    failed = {r["kernel"]: r["failure"] for r in result["rows"] if "failure" in r}
    for kernel, why in failed.items():
        print(f"  {kernel}: not measured: {why}")
    mape = result["mape"]
    counted = f"{result['measured']} of {result['figures']} figures"
    for page, (page_mape, n) in result["mape_by_page"].items():
        if page_mape is not None:
            print(f"  {page}: MAPE {100 * page_mape:.1f}% over {n} figures")
    print(f"MAPE {100 * mape:.1f}% over {counted}" if mape is not None else "no figure measured")
    times = ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items())
    print(f"simulated on {result['chip']} (timing only) in {sum(result['seconds'].values()):.0f} s: {times}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="only kernels whose name contains this (v2, v5, dma, dma_128x128, ...)")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    a = p.parse_args(argv)
    result = compare(a.only)
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
