"""examples/distributed: DDP, FSDP2, tensor and pipeline parallelism on 2 (and 4) ranks, each
matching the same training in one process; the FSDP2 profile shows compute and collectives per rank."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from launch import REPO, check_ok, launch  # noqa: E402

EXAMPLES = REPO / "examples" / "distributed"
# Ranks share one stdout pipe: a line of one can run into the other's, so no match may span them.
MATCH = re.compile(r"\[rank (\d+)\] ([^\[\]]+?): max \|param - single-process param\| = ([0-9.eE+-]+)")


def _run_example(name: str, nproc: int) -> list[str]:
    results = launch(EXAMPLES / f"{name}.py", nproc, timeout=120)
    check_ok(results)
    return [r.stdout for r in results]


def _check_matches(outputs: list[str], name: str) -> None:
    for rank, out in enumerate(outputs):
        found = MATCH.findall(out)
        assert len(found) == 1 and int(found[0][0]) == rank and found[0][1].startswith(name), out
        assert float(found[0][2]) <= 1e-5, out


@pytest.mark.parametrize(
    "name, nproc",
    [
        ("tp", 2),
        ("pp", 2),
        pytest.param("fsdp2", 4, marks=pytest.mark.slow),
        pytest.param("ddp", 4, marks=pytest.mark.slow),
        pytest.param("tp", 4, marks=pytest.mark.slow),
        pytest.param("pp", 3, marks=pytest.mark.slow),
    ],
)
def test_example_matches_the_single_process_result(name, nproc):
    _check_matches(_run_example(name, nproc), name)


def test_ddp_ranks_train_on_different_shards_and_end_with_the_single_process_weights():
    outputs = _run_example("ddp", 2)
    _check_matches(outputs, "ddp")
    losses = [re.search(r"losses (\[.*\])", out).group(1) for out in outputs]
    assert losses[0] != losses[1]  # each rank saw its own half of the batch


def test_the_fsdp2_profile_shows_compute_and_collectives_on_every_rank(tmp_path):
    """(Also the 2-rank FSDP2 check: the profiled script prints its match with one process.)"""
    results = launch(
        HERE / "workers" / "profile_rank.py", 2, str(tmp_path), str(EXAMPLES / "fsdp2.py"), timeout=120
    )
    check_ok(results)
    _check_matches([r.stdout for r in results], "fsdp2")
    for rank in range(2):
        trace = json.loads((tmp_path / f"rank{rank}" / "trace.json").read_text())
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        tracks = {
            (e["pid"], e["tid"]): e["args"]["name"]
            for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
        }
        by_track: dict[str, set[str]] = {}
        for e in events:
            if e.get("ph") == "X" and (e["pid"], e.get("tid")) in tracks:
                by_track.setdefault(tracks[(e["pid"], e["tid"])], set()).add(e["name"])
        assert {"neuron::all_gather", "neuron::reduce_scatter"} <= by_track.get("Collectives", set()), (
            by_track
        )
        assert any(name.startswith("aten::") for name in by_track.get("Device ops", ())), by_track


def test_ddp_under_torchrun_with_set_device_local_rank_matches_one_process():
    """The example as users launch it: torchrun, each rank on neuron:{LOCAL_RANK} (neuron:0 and
    neuron:1, so rank 1's backward runs on a second device index)."""
    import os
    import subprocess

    env = {**os.environ, "NEURON_SIM": "1", "NEURON_SIM_NUMERICS": "fast", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(EXAMPLES / "ddp.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    ranks = sorted(MATCH.findall(done.stdout))
    assert [r for r, _, _ in ranks] == ["0", "1"], done.stdout
    assert all(float(diff) <= 1e-5 for _, _, diff in ranks), done.stdout
