"""Profiling overhead: train_gpt on the emulated device, plain vs under ``neuronsim profile``'s
recording (op detail: torch.profiler host ops + device clock + writing trace/summary), measured
side by side in one run (this machine is shared and noisy: compare the ratio). Target: <= 1.10.

    python benchmarks/bench_profile.py [--steps 10] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

import neuronsim
from neuronsim import env

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py"


def plain(args: list[str]) -> float:
    from neuronsim.cli.script import run_script

    start = time.perf_counter()
    assert run_script(str(EXAMPLE), args) == 0
    return time.perf_counter() - start


def recorded(args: list[str], detail: str, host_ops: bool) -> float:
    """The script under ``neuronsim profile``'s recording only (torch.profiler + device clock)."""
    from neuronsim.cli.profile import _run_recorded
    from neuronsim.profiler import session

    start = time.perf_counter()
    rec = session.start(detail)
    code, _ = _run_recorded(str(EXAMPLE), args, host_ops, 200_000, rec)
    session.stop()
    assert code == 0
    return time.perf_counter() - start


def profiled(args: list[str], detail: str, out: str, host_ops: bool) -> float:
    """The whole ``neuronsim profile`` command, in this process: recording and writing the files."""
    from neuronsim.cli.profile import profile

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        flag = "--host-ops" if host_ops else "--no-host-ops"
        code = profile.main(["-o", out, "--detail", detail, flag, str(EXAMPLE), *args], standalone_mode=False)
    assert code == 0
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--detail", choices=["op", "instruction"], default="op")
    p.add_argument(
        "--no-host-ops",
        dest="host_ops",
        action="store_false",
        help="profile without torch.profiler host ops (device clock only)",
    )
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    neuronsim.enable()
    from neuronsim.device import clock

    args = ["--steps", str(a.steps), "--quiet"]
    plain(["--steps", "1", "--quiet"])  # warm-up: imports, caches
    os.environ.setdefault(env.NEURON_SIM, "1")
    best = {"plain": float("inf"), "recorded": float("inf"), "profiled": float("inf")}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(a.repeats):  # interleaved, so load changes hit all three
            for name, fn in (
                ("plain", lambda: plain(args)),
                ("recorded", lambda: recorded(args, a.detail, a.host_ops)),
                ("profiled", lambda: profiled(args, a.detail, out, a.host_ops)),
            ):
                clock.clock(0).reset()
                best[name] = min(best[name], fn())
    result = {
        "steps": a.steps,
        "detail": a.detail,
        "host_ops": a.host_ops,
        **{f"{k}_s": v for k, v in best.items()},
        "recording_ratio": best["recorded"] / best["plain"],
        "overhead_ratio": best["profiled"] / best["plain"],
        "torch": torch.__version__,
    }
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        host = "with" if a.host_ops else "without"
        print(
            f"train_gpt {a.steps} steps, {a.detail} detail, {host} host ops: "
            f"plain {best['plain']:.3f} s, recording "
            f"{best['recorded']:.3f} s (ratio {result['recording_ratio']:.3f}), whole profile command "
            f"{best['profiled']:.3f} s (ratio {result['overhead_ratio']:.3f}; target <= 1.10)"
        )


if __name__ == "__main__":
    sys.exit(main())
