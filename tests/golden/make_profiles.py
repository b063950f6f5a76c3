"""Run the golden cases and print their profiles as one JSON object (run in a fresh process).

Each case is a small, fixed workload profiled through the public surfaces a user sees:
``nki.simulate(profile=True)`` plus the profiler's launch trace for NKI kernels, and a profiling
session's device events drawn on the simulated timeline for native ops. Only simulated,
deterministic values are kept; absolute paths become relative to the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "nki"))


def _relative(value):
    """Strings with the repository's path in them, made relative (goldens travel between checkouts)."""
    if isinstance(value, str):
        return value.replace(str(REPO) + "/", "")
    if isinstance(value, dict):
        return {k: _relative(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_relative(v) for v in value]
    return value


def _nki_case(kernel, args) -> dict:
    import neuronsim.nki as nki
    from neuronsim.profiler import session
    from neuronsim.profiler.trace import launch_trace

    session.start(detail="instruction")
    try:
        _, profile = nki.simulate(kernel, profile=True, chip="trn2")(*args)
    finally:
        recorded = session.stop()
    (launch,) = recorded.launches
    timeline = [[e.engine, e.opcode, e.start * 1e9, e.end * 1e9, e.queue, e.location]
                for e in profile.timeline]
    return {"summary": profile.summary, "timeline": timeline, "trace": launch_trace(launch.placed)}


def _native_case() -> dict:
    import torch

    import neuronsim
    from neuronsim.profiler import session
    from neuronsim.profiler.trace import device_trace

    neuronsim.enable()
    session.start(detail="instruction")
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 384, generator=g).to("neuron")
        w = torch.randn(384, 128, generator=g).to("neuron")
        y = torch.softmax(torch.relu(x @ w) + 1.0, dim=-1)
        y.sum().cpu()
        events = session.device_events()[0]
    finally:
        session.stop()
    return {"ops": [[e.name, e.kind, e.start_ns, e.duration_ns, e.bytes] for e in events],
            "trace": device_trace(events, chip_name="trn2", detail="instruction")}


def cases() -> dict:
    from matmul import inputs, matmul_blocked
    from softmax import softmax
    from tensor_add import tensor_add

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 4096), dtype=np.float32)
    b = rng.standard_normal((256, 4096), dtype=np.float32)
    return {
        "nki_tensor_add": lambda: _nki_case(tensor_add, (a, b)),
        "nki_matmul_blocked": lambda: _nki_case(matmul_blocked, inputs(K=256, M=512, N=1024)),
        "nki_softmax": lambda: _nki_case(softmax, (rng.standard_normal((256, 1024), dtype=np.float32),)),
        "native_ops": _native_case,
    }


def main() -> None:
    out = {name: _relative(make()) for name, make in cases().items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
