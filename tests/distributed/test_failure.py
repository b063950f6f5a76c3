"""A rank that dies or hangs makes the others fail with a clear error within the timeout."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from launch import launch  # noqa: E402

from neuronsim import env  # noqa: E402
from neuronsim.errors import OptionError  # noqa: E402

TIMEOUT_S = 5


def _outcome(mode: str) -> dict:
    results = launch(
        HERE / "workers" / "failure.py",
        2,
        mode,
        timeout=180,  # an upper bound (a loaded machine starts torch slowly); rank 0 ends it first
        stop_after_rank=0,
        env={env.NEURON_SIM_COLLECTIVE_TIMEOUT: str(TIMEOUT_S)},
    )
    assert results[0].returncode == 0, results[0].stderr[-4000:]
    return json.loads(results[0].stdout.strip().splitlines()[-1])


def test_a_rank_that_dies_fails_the_others_at_once_with_a_collective_error():
    got = _outcome("die")
    assert got["error"] == "neuronsim.errors.CollectiveError"
    assert got["message"].startswith("rank 0: all_reduce over ranks [0, 1] failed: a peer rank died")
    assert got["seconds"] < TIMEOUT_S


def test_a_rank_that_hangs_fails_the_others_after_the_timeout():
    got = _outcome("hang")
    assert got["error"] == "neuronsim.errors.CollectiveError"
    assert got["message"].startswith(
        f"rank 0: all_reduce over ranks [0, 1] failed: no answer from a peer within the {TIMEOUT_S} s timeout"
    )
    assert TIMEOUT_S * 0.9 < got["seconds"] < TIMEOUT_S + 10


@pytest.mark.parametrize("mode, collective", [
    ("ddp_die", "all_reduce"),  # DDP's reducer, waiting on the gradient all-reduce's future
    # The other paths to the same translation run with the slow tests (CI's time budget).
    pytest.param("ddp_hook_die", "all_reduce", marks=pytest.mark.slow),  # a Python comm hook's future chain
    pytest.param("fsdp_die", "all_gather", marks=pytest.mark.slow),  # FSDP2 gathering the parameters
    pytest.param("barrier_die", "barrier", marks=pytest.mark.slow),
])
def test_a_rank_that_dies_under_ddp_fsdp_or_a_barrier_gives_a_collective_error(mode, collective):
    got = _outcome(mode)
    assert got["error"] == "neuronsim.errors.CollectiveError", got
    assert got["message"].startswith(f"rank 0: {collective} over ranks [0, 1] failed: a peer rank died")
    assert got["seconds"] < TIMEOUT_S


@pytest.mark.slow  # the timeout path itself runs in CI without DDP (above)
def test_a_rank_that_hangs_under_ddp_fails_the_others_after_the_timeout():
    got = _outcome("ddp_hang")
    assert got["error"] == "neuronsim.errors.CollectiveError", got
    assert got["message"].startswith(
        f"rank 0: all_reduce over ranks [0, 1] failed: no answer from a peer within the {TIMEOUT_S} s timeout"
    )
    assert TIMEOUT_S * 0.9 < got["seconds"] < TIMEOUT_S + 10


@pytest.mark.slow
def test_a_rank_that_never_joins_fails_init_after_the_timeout():
    got = _outcome("late")
    assert got["error"] is not None and "joined" in got["message"]
    assert got["seconds"] < TIMEOUT_S + 10


def test_timeout_comes_from_init_then_the_environment_then_60_s(monkeypatch):
    import torch.distributed as dist

    from neuronsim.device.distributed.backend import collective_timeout

    monkeypatch.delenv(env.NEURON_SIM_COLLECTIVE_TIMEOUT, raising=False)
    assert collective_timeout(None) == datetime.timedelta(seconds=60)
    assert collective_timeout(dist.default_pg_timeout) == datetime.timedelta(seconds=60)
    assert collective_timeout(datetime.timedelta(seconds=7)) == datetime.timedelta(seconds=7)
    monkeypatch.setenv(env.NEURON_SIM_COLLECTIVE_TIMEOUT, "2.5")
    assert collective_timeout(None) == datetime.timedelta(seconds=2.5)
    monkeypatch.setenv(env.NEURON_SIM_COLLECTIVE_TIMEOUT, "soon")
    with pytest.raises(OptionError, match=env.NEURON_SIM_COLLECTIVE_TIMEOUT):
        collective_timeout(None)
