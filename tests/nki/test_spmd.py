"""SPMD launch grids and LNC=2: ``kernel[2](...)``, ``nl.program_id``, shared HBM, ``core_barrier``."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError


@nki.jit
def scale_rows(a):
    """Each instance scales its share of the 128-row tiles by 2."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = a.shape[0] // 128
    n, pid = nl.num_programs(), nl.program_id(0)
    for i in nl.affine_range(pid * tiles // n, (pid + 1) * tiles // n):
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], nl.multiply(t, 2.0))
    return out


def test_program_id_is_a_constant_of_each_instance_and_outputs_are_shared():
    a = np.random.default_rng(0).standard_normal((1024, 512), dtype=np.float32)
    for grid in (1, 2, 4):
        np.testing.assert_array_equal(nki.simulate(scale_rows[grid])(a), 2 * a)
    traced = scale_rows[2].specialize((a,))
    assert [inst.program_id for inst in traced.instances] == [(0,), (1,)]
    assert scale_rows.traces == 3  # one trace per grid; the cache is shared by scale_rows[...]


def test_lnc2_instances_run_on_two_cores_in_parallel():
    a = np.random.default_rng(1).standard_normal((2048, 1024), dtype=np.float32)
    _, one = nki.simulate(scale_rows, profile=True)(a)
    _, two = nki.simulate(scale_rows[2], profile=True)(a)
    assert two.summary["neuroncore_count"] == 2
    assert two.summary["total_time"] < 0.6 * one.summary["total_time"]
    assert {e.core for e in two.timeline} == {0, 1}
    starts = {core: min(e.start for e in two.timeline if e.core == core) for core in (0, 1)}
    assert starts[0] == starts[1] < 1e-6  # both start with their first load (after its trigger latency)


def test_core_barrier_orders_the_cores():
    """Each core writes its half of a shared tensor; after the barrier each reads the other half."""

    @nki.jit
    def swap_halves(a):
        half = a.shape[0] // 2
        exchange = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm, name="exchange")
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        mine = slice(me * half, (me + 1) * half)
        other = slice((1 - me) * half, (2 - me) * half)
        nl.store(exchange[mine, :], nl.multiply(nl.load(a[mine, :]), 10.0))
        nisa.core_barrier(data=exchange, cores=(0, 1))
        nl.store(out[mine, :], nl.load(exchange[other, :]))
        return out

    a = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    out, prof = nki.simulate(swap_halves[2], profile=True)(a)
    np.testing.assert_array_equal(out, 10 * np.concatenate([a[128:], a[:128]]))
    assert {e.phase for e in prof.timeline} == {0, 1}
    phase0_end = max(e.end for e in prof.timeline if e.phase == 0)
    assert min(e.start for e in prof.timeline if e.phase == 1) >= phase0_end


def test_grid_outputs_must_be_shared():
    @nki.jit
    def private(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, nl.load(a))
        return out

    with pytest.raises(ConstraintError, match="nl.shared_hbm"):
        private[2].specialize((np.zeros((128, 4), np.float32),))
    nki.simulate(private)(np.zeros((128, 4), np.float32))  # a single instance may return private HBM


def test_tiles_keep_their_values_across_a_core_barrier():
    """Each core has its own SBUF that lives on through the barrier (S12: two physical cores)."""

    @nki.jit
    def hold(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        rows = slice(me * 128, (me + 1) * 128)
        t = nl.multiply(nl.load(a[rows, :]), float(me + 1))  # differs per core, same SBUF address
        nisa.core_barrier(data=out, cores=(0, 1))
        nl.store(out[rows, :], t)
        return out

    a = np.random.default_rng(3).standard_normal((256, 64), dtype=np.float32)
    out = nki.simulate(hold[2])(a)
    np.testing.assert_array_equal(out, np.concatenate([a[:128], 2 * a[128:]]))


def test_a_tile_reusing_a_held_tiles_bytes_after_a_barrier_does_not_clobber_it():
    """bwmm_shard_on_H's block expert index: written before a barrier, read after it, and its bytes
    reused by a tile first seen after the barrier. That tile's uninitialized fill must not reach the
    held tile before its last read (it did, and the index read back as -1: out of bounds)."""

    @nki.jit
    def hold_then_reuse(a):
        out = nl.ndarray((128, 2), dtype=a.dtype, buffer=nl.shared_hbm)
        held = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=held, src=a)
        nisa.core_barrier(data=out, cores=(0, 1))
        nisa.dma_copy(dst=out[:, 0:1], src=held)  # the held tile's last read
        later = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)  # first seen after the barrier
        nisa.memset(dst=later, value=5.0)
        nisa.dma_copy(dst=out[:, 1:2], src=later)
        return out

    a = np.arange(128, dtype=np.float32).reshape(128, 1)
    traced = hold_then_reuse[2].specialize((a,))
    tiles = {t.name: t.address for t in traced.instances[0].programs[1].tensors if t.memory.name == "SBUF"}
    assert len(set(tiles.values())) == 1, tiles  # the two tiles share their bytes
    out = nki.simulate(hold_then_reuse[2])(a)
    np.testing.assert_array_equal(out, np.concatenate([a, np.full_like(a, 5.0)], axis=1))


@nki.jit
def exchange_max(a):
    """attention_tkg's pattern: each core reduces its half, swaps the result with the other core by
    sendrecv, and combines the two."""
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    me = nl.program_id(0)
    half = a.shape[1] // 2
    x = nl.load(a[:, me * half : (me + 1) * half])
    local = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=local, op=nl.maximum, data=x, axis=1)
    remote = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=local, dst=remote, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    both = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=both, data1=local, data2=remote, op=nl.maximum)
    if me == 0:
        nl.store(out, both)
    return out


def test_sendrecv_exchanges_tiles_between_the_two_cores():
    a = np.random.default_rng(4).standard_normal((128, 512), dtype=np.float32)
    out, prof = nki.simulate(exchange_max[2], profile=True)(a)
    np.testing.assert_array_equal(out[:, 0], a.max(axis=1))
    assert {e.phase for e in prof.timeline} == {0, 1}  # the exchange synchronizes the cores


def test_sendrecv_misuse_names_the_kernel_line():
    a = np.zeros((128, 512), np.float32)
    with pytest.raises(ConstraintError, match=r"test_spmd.py:\d+.*ranks are 0 or 1") as info:
        nki.simulate(exchange_max)(a)  # one instance: no core to exchange with
    assert "send_to_rank=1" in str(info.value)

    @nki.jit
    def lopsided(a):
        me = nl.program_id(0)
        t = nl.load(a)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=0, recv_from_rank=1 - me, pipe_id=0)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    with pytest.raises(ConstraintError, match="on rank 1 receives from rank 0, but rank 0 sends to rank 0"):
        nki.simulate(lopsided[2])(np.zeros((128, 4), np.float32))


@nki.jit
def running_exchange(a, trips):
    """A sendrecv in a loop on a register, nothing else synchronizing the cores: each trip a core
    sends ``its row block * (trip + 1)`` and accumulates what it receives. Both trips use the call's
    one pair of staging buffers, so a core must not send trip j+1 before its peer took trip j."""
    me = nl.program_id(0)
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n, src=trips)
    reg = nisa.register_alloc(n)
    mine = nl.load(a[me * 128 : (me + 1) * 128, :])
    acc = nl.ndarray(mine.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(acc, value=0.0)
    for _ in nl.dynamic_range(0, reg):
        nisa.tensor_tensor(dst=mine, data1=mine, data2=mine, op=nl.add)
        got = nl.ndarray(mine.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=got, op=nl.add)
    if me == 0:
        nl.store(out, acc)
    return out


def test_sendrecv_in_a_register_loop_pauses_every_trip_on_both_cores():
    a = np.random.default_rng(5).integers(-4, 4, (256, 64)).astype(np.float32)
    for trips in (0, 1, 3):
        out, prof = nki.simulate(running_exchange[2], profile=True)(a, np.array([[trips]], np.int32))
        expected = sum(a[128:] * 2 ** (t + 1) for t in range(trips)) if trips else np.zeros_like(a[128:])
        np.testing.assert_array_equal(out, expected)  # small integers: exact in float32
        # each exchange: the cores meet after sending and again after receiving
        assert len({e.phase for e in prof.timeline}) == 2 * trips + 1
        assert {e.core for e in prof.timeline} == {0, 1}


def test_cores_reaching_a_loop_barrier_unequally_is_an_error():
    @nki.jit
    def uneven(a, trips):
        me = nl.program_id(0)
        n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n, src=trips[me : me + 1, :])
        reg = nisa.register_alloc(n)
        t = nl.load(a)
        for _ in nl.dynamic_range(0, reg):
            nisa.core_barrier(a, (0, 1))  # <- barrier
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    a = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(nki.simulate(uneven[2])(a, np.array([[2], [2]], np.int32)), a)
    with pytest.raises(ConstraintError, match=r"do not meet at one barrier.*instance 1 ran to the end") as e:
        nki.simulate(uneven[2])(a, np.array([[2], [1]], np.int32))
    assert e.value.location.endswith(f":{uneven.fn.__code__.co_firstlineno + 8}")  # the barrier line


def test_a_loop_barrier_in_a_launch_over_ranks_is_unsupported():
    from neuronsim.errors import UnsupportedError

    a = np.zeros((256, 64), np.float32)
    with pytest.raises(UnsupportedError, match=r"test_spmd.py:\d+.*simulate_ranks"):
        nki.simulate_ranks(running_exchange[2], 2)({"a": a, "trips": np.array([[1]], np.int32)})
