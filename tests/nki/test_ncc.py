"""nki.collectives (ncc) on a collective launch (nki/collectives.py, nki/ranks.py): values per rank, the
rendezvous in time, and the mistakes a kernel can make."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.collectives as ncc
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, UnsupportedError
from neuronsim.nki import simulate_ranks
from neuronsim.nki.collectives import ReplicaGroup

RANKS4 = ReplicaGroup([[0, 1, 2, 3]])


def _hbm_collective(op):
    @nki.jit
    def kernel(x, replica_group, extra):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=src, src=x)
        op(dst, src, replica_group, extra)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out

    return kernel


def _inputs(xs, group, extra=None):
    return lambda r: {"x": xs[r], "replica_group": group, "extra": extra}


def test_all_to_all_sends_chunk_j_of_rank_i_to_chunk_i_of_rank_j():
    xs = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)
    kernel = _hbm_collective(lambda d, s, g, _: ncc.all_to_all(srcs=[s], dsts=[d], replica_group=g,
                                                             collective_dim=0))
    outs = simulate_ranks(kernel, 4)(_inputs(xs, RANKS4))
    for r in range(4):
        np.testing.assert_array_equal(outs[r], np.concatenate([xs[j][2 * r:2 * r + 2] for j in range(4)]))


def test_ring_permute_receives_the_predecessors_data_and_names_its_rank():
    xs = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)
    ring = ReplicaGroup([[0, 2], [1, 3]])  # two rings of two

    def permute(d, s, g, _):
        assert ncc.collective_permute_implicit_current_processing_rank_id(1, g).known_value == \
            {0: 2, 2: 0, 1: 3, 3: 1}[ncc.rank_id().known_value]
        ncc.collective_permute_implicit(srcs_by_channel=[[s]], dsts_by_channel=[[d]], replica_group=g)

    outs = simulate_ranks(_hbm_collective(permute), 4)(_inputs(xs, ring))
    for r, pred in {0: 2, 2: 0, 1: 3, 3: 1}.items():
        np.testing.assert_array_equal(outs[r], xs[pred])


def test_a_rank_waits_for_the_slowest_at_the_rendezvous():
    @nki.jit
    def uneven(x, replica_group, extra):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        if ncc.rank_id().known_value == 1:  # rank 1 does more work before the collective
            for _ in range(8):
                nisa.dma_copy(dst=src, src=x)
        nisa.dma_copy(dst=src, src=x)
        dst = nl.ndarray((x.shape[0] * 2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        ncc.all_gather(srcs=[src], dsts=[dst], replica_group=replica_group, collective_dim=0)
        return dst

    xs = np.ones((2, 128, 512), np.float32)
    _, profs = simulate_ranks(uneven, 2, profile=True)(_inputs(xs, ReplicaGroup([[0, 1]])))
    t0, t1 = (p.summary["total_time"] for p in profs)
    assert t0 == t1  # rank 0 ends with rank 1: its gather waited
    first0 = min(e.start for e in profs[0].timeline if e.phase == 1)
    first1 = min(e.start for e in profs[1].timeline if e.phase == 1)
    assert first0 == first1 > max(e.end for e in profs[0].timeline if e.phase == 0)


def test_collective_mistakes_are_located_errors():
    xs = np.ones((2, 8, 16), np.float32)
    gather = _hbm_collective(lambda d, s, g, _: ncc.all_gather(srcs=[s], dsts=[d], replica_group=g,
                                                             collective_dim=0))
    with pytest.raises(ConstraintError,
                       match=r"replica group \[0, 1\] has ranks \[1\], but this launch has 1") as err:
        nki.simulate(gather)(xs[0], ReplicaGroup([[0, 1]]), None)
    assert err.value.location.split(":")[0].endswith("test_ncc.py")
    with pytest.raises(ConstraintError, match="share of dst and src.*differ in size"):  # dst is not 2x src
        simulate_ranks(gather, 2)(_inputs(xs, ReplicaGroup([[0, 1]])))
    reduce_max = _hbm_collective(lambda d, s, g, _: ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g,
                                                                 op=nl.maximum))
    with pytest.raises(UnsupportedError, match="adds only"):
        simulate_ranks(reduce_max, 2)(_inputs(xs, ReplicaGroup([[0, 1]])))
    with pytest.raises(Exception, match="must not overlap"):
        ReplicaGroup([[0, 1], [1, 2]])


def test_a_group_spanning_chips_adds_the_links_time_from_the_chip_file():
    """trn2 at LNC=1: 8 ranks per chip. Ranks 0 and 8 (1 and 9) are on two chips of one instance, so their
    gather adds one NeuronLink step: the [interconnect] latency plus the bytes over its bandwidth;
    ranks 0 and 1 share a chip and add nothing beyond their DMAs."""
    from neuronsim.nki.ranks import rendezvous_ns
    from neuronsim.sim.chips import get_chip
    from neuronsim.sim.interconnect import interconnect

    xs = np.ones((10, 128, 512), np.float32)

    def total(group):
        @nki.jit
        def kernel(x, replica_group, extra):
            src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=src, src=x)
            dst = nl.ndarray((256, 512), dtype=x.dtype, buffer=nl.shared_hbm)
            ncc.all_gather(srcs=[src], dsts=[dst], replica_group=replica_group, collective_dim=0)
            return dst

        _, profs = simulate_ranks(kernel, 10, profile=True)(_inputs(xs, ReplicaGroup(group)))
        return profs[0].summary["total_time"]

    net = interconnect(get_chip("trn2"))
    bandwidth, latency = net.link("neuronlink")
    link_ns = latency + 128 * 512 * 4 / bandwidth * 1e9
    assert rendezvous_ns([("all_gather", (0, 8), 1, 128 * 512 * 4)], net, 8) == {1: link_ns}
    assert rendezvous_ns([("all_gather", (0, 1), 1, 128 * 512 * 4)], net, 8) == {}
    near = total([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])
    far = total([[0, 8], [1, 9], [2, 3], [4, 5], [6, 7]])
    assert far - near == pytest.approx(link_ns * 1e-9, rel=1e-9)
