"""The ``neuron`` c10d backend: every collective on 2 and 4 ranks (4 with the slow tests) against
single-process references, and the simulated collective times against the topology formulas."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "workers"))
from cases import TIMED_BYTES, expected  # noqa: E402
from launch import check_ok, launch  # noqa: E402

from neuronsim.device.distributed import topology  # noqa: E402
from neuronsim.sim.chips import get_chip  # noqa: E402


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=["2ranks", "4ranks"])
def run(request, tmp_path_factory):
    n = request.param
    out = tmp_path_factory.mktemp(f"collectives{n}")
    check_ok(launch(HERE / "workers" / "collectives.py", n, str(out), timeout=90))
    return n, [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(n)]


def test_every_collective_matches_the_single_process_reference(run):
    n, ranks = run
    want = expected(n)
    for r, saved in enumerate(ranks):
        got = saved["results"]
        assert set(want[r]) <= set(got), sorted(set(want[r]) - set(got))
        for key, ref in want[r].items():
            value = got[key]
            assert value.dtype == ref.dtype and value.shape == ref.shape, key
            tol = dict(atol=5e-2, rtol=2e-2) if ref.dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(value, ref, equal_nan=True, **tol, msg=f"rank {r}: {key}")


def test_every_rank_sees_the_same_collective_timeline(run):
    """Ranks start each collective together (when the last one was ready): identical timelines."""
    n, ranks = run
    timelines = [saved["events"] for saved in ranks]
    world = [[e for e in t if not e[0].endswith(("send", "recv"))] for t in timelines]
    for t in world[1:]:
        assert [e[0] for e in t] == [e[0] for e in world[0]]
    # the world-group events (not the subgroup ones, last) start at the same simulated time
    for events in zip(*[t[:-1] for t in world], strict=True):
        assert len({round(e[1], 3) for e in events}) == 1, events
    for saved in ranks:
        last = saved["events"][-1]
        assert saved["now_ns"] >= last[1] + last[2]  # the clock waited for the collective


def _ring(n, nbytes, bw, lat, factor=1):
    return factor * (n - 1) / n * nbytes / bw * 1e9 + factor * (n - 1) * lat


def test_simulated_times_follow_the_ring_formulas(run):
    """all_reduce 2(n-1)/n*B/bw + 2(n-1)*lat, all_gather/reduce_scatter/all_to_all (n-1)/n*B/bw +
    (n-1)*lat (B = the full size), broadcast B/bw + (n-1)*lat, barrier ceil(log2 n)*lat; ranks on one
    trn2 chip use the intra-chip link (chip file [interconnect])."""
    n, ranks = run
    net = topology.interconnect(get_chip("trn2"))
    chip = get_chip("trn2")
    bw = chip.dma_engines * chip.dma_engine_bandwidth_bytes_per_s * chip.default_lnc  # a logical core's DMA
    lat = net.intra_chip_latency_ns
    events = ranks[0]["events"][ranks[0]["timed_start"] :]
    want = []
    for b in TIMED_BYTES:
        want += [
            ("all_reduce", b, _ring(n, b, bw, lat, 2)),
            ("all_gather", n * b, _ring(n, n * b, bw, lat)),
            ("reduce_scatter", b, _ring(n, b, bw, lat)),
            ("broadcast", b, b / bw * 1e9 + (n - 1) * lat),
            ("all_to_all", b, _ring(n, b, bw, lat)),
        ]
    want.append(("barrier", 0, math.ceil(math.log2(n)) * lat))
    sub = n // 2  # ranks {0, 2} / {1, 3}: a one-rank group costs nothing
    want.append(("all_reduce", 4096, _ring(sub, 4096, bw, lat, 2) if sub > 1 else 0.0))
    assert [(e[0], e[3]) for e in events] == [(f"neuron::{k}", b) for k, b, _ in want]
    for e, (_, _, ns) in zip(events, want, strict=True):
        assert e[2] == pytest.approx(ns, rel=1e-9), e
    # the extra time of the bigger all_reduce is its extra bytes at the link's bandwidth
    ar = [e for e in events if e[0] == "neuron::all_reduce"]
    extra = 2 * (n - 1) / n * (TIMED_BYTES[1] - TIMED_BYTES[0]) / bw * 1e9
    assert ar[1][2] - ar[0][2] == pytest.approx(extra, rel=1e-9)
