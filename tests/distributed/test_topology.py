"""Rank placement and collective cost formulas (no processes): chip, NeuronLink and instance network."""

from __future__ import annotations

import math

import pytest

from neuronsim.device.distributed import topology
from neuronsim.errors import ChipSpecError
from neuronsim.sim.chips import get_chip

TRN2 = topology.interconnect(get_chip("trn2"))


def test_trn2_places_four_logical_cores_per_chip_and_sixteen_chips_per_instance():
    assert TRN2.logical_cores_per_chip == 4 and TRN2.chips_per_instance == 16
    assert TRN2.place(0) == (0, 0, 0) and TRN2.place(3) == (0, 0, 3) and TRN2.place(4) == (0, 1, 0)
    assert TRN2.place(63) == (0, 15, 3) and TRN2.place(64) == (1, 0, 0)
    assert TRN2.level([0, 1, 2, 3]) == topology.CHIP
    assert TRN2.level(range(8)) == topology.NEURONLINK
    assert TRN2.level([0, 64]) == topology.INSTANCE_NETWORK


def test_numbers_come_from_the_chip_files():
    assert TRN2.neuronlink_bandwidth_bytes_per_s == 1.024e12  # trn2.48xlarge, inside an instance
    assert TRN2.instance_network_bandwidth_bytes_per_s == 3.2e12 / 8  # 3.2 Tbps EFA
    # a logical core (LNC=2) drives 2 x 16 DMA engines at 23 GB/s: the chip level, and a cap on the others
    assert TRN2.link(topology.CHIP)[0] == pytest.approx(2 * 16 * 23e9)
    assert TRN2.link(topology.NEURONLINK)[0] == pytest.approx(2 * 16 * 23e9)
    assert TRN2.link(topology.INSTANCE_NETWORK) == (400e9, TRN2.instance_network_latency_ns)
    trn3 = topology.interconnect(get_chip("trn3"))
    assert trn3.neuronlink_bandwidth_bytes_per_s == 256e9


@pytest.mark.parametrize(
    "ranks, level",
    [
        (range(2), topology.CHIP),
        (range(4), topology.CHIP),
        (range(8), topology.NEURONLINK),
        (range(64), topology.NEURONLINK),
        (range(128), topology.INSTANCE_NETWORK),
        ([0, 4, 8], topology.NEURONLINK),
    ],
)
@pytest.mark.parametrize("nbytes", [0, 4096, 1 << 20, 3 << 28])
def test_collective_costs_follow_the_formulas_over_the_slowest_link(ranks, level, nbytes):
    ranks = list(ranks)
    n = len(ranks)
    bw, lat = TRN2.link(level)
    b = nbytes / bw * 1e9
    assert topology.collective_ns("all_reduce", nbytes, ranks, TRN2) == pytest.approx(
        2 * (n - 1) / n * b + 2 * (n - 1) * lat
    )
    for ring in ("all_gather", "reduce_scatter", "all_to_all"):
        assert topology.collective_ns(ring, nbytes, ranks, TRN2) == pytest.approx(
            (n - 1) / n * b + (n - 1) * lat
        )
    assert topology.collective_ns("broadcast", nbytes, ranks, TRN2) == pytest.approx(b + (n - 1) * lat)
    assert topology.collective_ns("barrier", 0, ranks, TRN2) == pytest.approx(math.ceil(math.log2(n)) * lat)


def test_slower_levels_cost_more_and_one_rank_costs_nothing():
    t = [topology.collective_ns("all_reduce", 1 << 24, r, TRN2) for r in ([0, 1], [0, 4], [0, 64])]
    assert t[0] < t[1] < t[2]
    assert topology.collective_ns("all_reduce", 1 << 24, [5], TRN2) == 0.0
    assert topology.collective_ns("send", 1000, [0, 64], TRN2) == pytest.approx(
        1000 / TRN2.instance_network_bandwidth_bytes_per_s * 1e9 + TRN2.instance_network_latency_ns
    )


def test_a_chip_file_without_an_interconnect_table_is_an_error(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[chip]\nname = 'mine'\n")
    with pytest.raises(ChipSpecError, match="no \\[interconnect\\] table"):
        topology.interconnect_from_file(str(path), 4, 1e12)
    path.write_text("[interconnect]\nchips_per_instance = { value = 2, status = 'assumed', source = 'x' }\n")
    with pytest.raises(ChipSpecError, match="missing keys"):
        topology.interconnect_from_file(str(path), 4, 1e12)
