"""Start N ranks of a worker script the way torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, ...).

Plain subprocesses, not torchrun: the elastic agent adds seconds per test. Every rank gets its own
output file; a rank that is still running after ``timeout`` is killed and reported.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
REPO = HERE.parents[1]


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    script: str | Path,
    nproc: int,
    *args: str,
    timeout: float = 60.0,
    env: dict | None = None,
    rank_env: dict[int, dict] | None = None,
    stop_after_rank: int | None = None,
) -> list[RankResult]:
    """Run the ranks; ``stop_after_rank``: kill the others once that rank has exited (a hung rank)."""
    port = free_port()
    # fast numerics: these tests are about the ranks, not kernel numerics (tests/kernels covers those),
    # and exact numerics pay a Numba compile per process whenever the simulator's source changed.
    base = {
        **os.environ,
        "NEURON_SIM": "1",
        "NEURON_SIM_NUMERICS": "fast",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }
    procs = []
    for rank in range(nproc):
        e = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), **((rank_env or {}).get(rank, {}))}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *args],
                env=e,
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    deadline = time.monotonic() + timeout
    if stop_after_rank is not None:
        try:
            procs[stop_after_rank].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append(RankResult(rank, p.returncode, out, err))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            results.append(RankResult(rank, None, out, err))
    return results


def check_ok(results: list[RankResult]) -> None:
    bad = [r for r in results if r.returncode != 0]
    assert not bad, "\n".join(
        f"rank {r.rank} exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}" for r in bad
    )
