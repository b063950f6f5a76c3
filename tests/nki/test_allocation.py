"""SBUF/PSUM allocation by liveness with rotating buffers for affine_range tiles (nki/allocate.py)."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import CapacityError, PsumCapacityError, SbufCapacityError
from neuronsim.nki.allocate import MAX_ROTATION
from neuronsim.sim.ir import Memory


def _traced(kernel, *args, chip="trn2"):
    return kernel.specialize(args, chip=chip).instances[0]


def _addresses(inst, prefix):
    return [t.address for t in inst.programs[0].tensors if t.name.split("_")[0] == prefix]


def _scale_kernel(loop):
    @nki.jit
    def scale(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in loop(a.shape[0] // 128):
            t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, name="t")
            nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128, :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=t)
        return out

    return scale


def test_a_tile_is_free_after_its_last_use():
    """sequential_range: no rotation, so every iteration reuses the previous tile's bytes."""
    inst = _traced(_scale_kernel(nl.sequential_range), np.zeros((1024, 512), np.float32))
    assert set(_addresses(inst, "t")) == {(0, 0)}


def test_affine_range_iterations_rotate_over_buffers():
    inst = _traced(_scale_kernel(nl.affine_range), np.zeros((1024, 512), np.float32))
    addrs = _addresses(inst, "t")
    assert inst.rotation[Memory.SBUF] == MAX_ROTATION
    assert len(set(addrs[:MAX_ROTATION])) == MAX_ROTATION  # consecutive iterations: different bytes
    assert addrs[MAX_ROTATION] in addrs[:MAX_ROTATION]  # then the buffers are reused
    assert len(set(addrs)) == MAX_ROTATION


def _sum_kernel(loop):
    @nki.jit
    def row_sum(a):
        out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, a.shape[1]), dtype=a.dtype)
        for i in loop(a.shape[0] // 128):
            t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, name="t")
            nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nl.store(out, acc)
        return out

    return row_sum


def test_rotation_lets_iterations_overlap_and_reuse_serializes_them():
    a = np.random.default_rng(0).standard_normal((1024, 2048), dtype=np.float32)
    ref = a.reshape(8, 128, 2048).sum(0)
    out_a, prof_a = nki.simulate(_sum_kernel(nl.affine_range), profile=True)(a)
    out_s, prof_s = nki.simulate(_sum_kernel(nl.sequential_range), profile=True)(a)
    np.testing.assert_allclose(out_a, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out_a, out_s)
    assert prof_a.summary["total_time"] < 0.8 * prof_s.summary["total_time"]
    # one buffer: the next load must wait until the previous add has read the tile (WAR)
    for prof, overlapped in ((prof_s, False), (prof_a, True)):
        loads = [e for e in prof.timeline if e.engine == "dma"][:-1]
        adds = [e for e in prof.timeline if e.opcode == "TENSOR_TENSOR"]
        waits = [nxt.start >= add.end - 1e-12 for add, nxt in zip(adds, loads[1:], strict=False)]
        assert not any(waits) if overlapped else all(waits)


def test_tiles_held_in_a_list_stay_live_until_their_last_use():
    @nki.jit
    def hold(a):
        out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        tiles = []
        for i in nl.sequential_range(4):
            tiles.append(nl.load(a[i * 128 : (i + 1) * 128, :]))
        acc = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, name="acc")
        nisa.tensor_copy(dst=acc, src=tiles[0])
        for t in tiles[1:]:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        later = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, name="later")
        nisa.tensor_scalar(dst=later, data=acc, op0=nl.multiply, operand0=1.0)
        nl.store(out, later)
        return out

    a = np.random.default_rng(1).standard_normal((512, 256), dtype=np.float32)
    inst = _traced(hold, a)
    loads = _addresses(inst, "load")
    assert len(set(loads)) == 4  # all four are live together
    assert _addresses(inst, "later")[0] in loads  # and their bytes are reused after the last add
    np.testing.assert_allclose(nki.simulate(hold)(a), a.reshape(4, 128, 256).sum(0), rtol=1e-6)


def test_rotation_shrinks_instead_of_failing_when_capacity_is_short():
    # 56000-byte tiles: four rotating buffers do not fit in a 212984-byte partition, three do
    inst = _traced(_scale_kernel(nl.affine_range), np.zeros((1024, 14000), np.float32))
    assert inst.rotation[Memory.SBUF] == 3


def test_psum_is_allocated_in_banks_and_rotates():
    @nki.jit
    def mm(a, b):
        out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        at, bt = nl.load(a), nl.load(b)
        for j in nl.affine_range(b.shape[1] // 128):
            acc = nl.ndarray((a.shape[1], 128), dtype=nl.float32, buffer=nl.psum, name="acc")
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt[:, j * 128 : (j + 1) * 128])
            nl.store(out[:, j * 128 : (j + 1) * 128], nl.copy(acc))
        return out

    a, b = np.ones((128, 64), np.float32), np.ones((128, 1024), np.float32)
    inst = _traced(mm, a, b)
    banks = {addr[1] for addr in _addresses(inst, "acc")}
    assert banks <= {k * 2048 for k in range(8)} and len(banks) == MAX_ROTATION
    assert np.all(nki.simulate(mm)(a, b) == 128.0)


def test_sbuf_over_capacity_names_the_tensor_size_limit_and_line():
    """Tiles that cannot all be in SBUF for one instruction cannot be spilled out of the way."""
    @nki.jit
    def hog(a):
        out = nl.ndarray((128, 20000), dtype=nl.float32, buffer=nl.shared_hbm)
        tiles = [nl.ndarray((128, 20000), dtype=nl.float32, buffer=nl.sbuf, name=f"big{i}") for i in range(3)]
        for t in tiles[:2]:
            nisa.memset(dst=t, value=0.0)
        nisa.tensor_tensor(dst=tiles[2], data1=tiles[0], data2=tiles[1], op=nl.add)
        nisa.dma_copy(dst=out, src=tiles[2])
        return out

    with pytest.raises(SbufCapacityError) as info:
        hog.specialize((np.zeros((128, 8), np.float32),))
    msg = str(info.value)
    assert "'big2'" in msg and "80000 bytes per partition" in msg and "212984" in msg
    assert "test_allocation.py:" in msg and isinstance(info.value, CapacityError)


def test_a_single_tile_larger_than_a_partition_fails_at_its_line():
    @nki.jit
    def huge(a):
        nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf, name="huge")
        return a

    with pytest.raises(SbufCapacityError, match=r"test_allocation.py:\d+.*'huge'.*240000 bytes.*212984"):
        huge.specialize((np.zeros((1, 1), np.float32),))
    # trn3 partitions are larger
    huge.specialize((np.zeros((1, 1), np.float32),), chip="trn3")


def test_more_than_eight_open_accumulation_groups_fail():
    """Nine matmul accumulations interleaved over K: when the ninth needs a bank, every other one is
    still to be accumulated into (only TensorE accumulates, in PSUM), so none can leave."""

    @nki.jit
    def banks(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        accs = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"acc{i}") for i in range(9)]
        for k in range(2):
            for acc in accs:
                nisa.nc_matmul(dst=acc, stationary=x[:, 0:128], moving=x, accumulate=k > 0)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        for acc in accs:
            nisa.tensor_copy(dst=res, src=acc)
        nl.store(out, res)
        return out

    with pytest.raises(PsumCapacityError) as info:
        banks.specialize((np.zeros((128, 512), np.float32),))
    msg = str(info.value)
    assert "'acc8'" in msg and "8 banks are held by 8 other tensors" in msg and "test_allocation.py:" in msg


def test_finished_psum_tiles_beyond_eight_banks_move_to_sbuf():
    """attn_fwd_v3's pattern: sixteen one-bank matmul results, all written before the first is read.
    A finished accumulation can live in SBUF (VectorE and ScalarE read both), so the ones needed
    last move there by a VectorE copy when the ninth needs a bank (psum_evict.py)."""

    @nki.jit
    def scores(q, k):
        out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        qs, ks = nl.load(q), nl.load(k)
        qk = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"qk{j}") for j in range(16)]
        for j in range(16):
            nisa.nc_matmul(dst=qk[j], stationary=qs, moving=ks[:, j * 512:(j + 1) * 512])
        row_max = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        for j in range(16):
            nisa.tensor_reduce(dst=row_max[:, j:j + 1], op=nl.maximum, data=qk[j], axis=1)
        nl.store(out, row_max)
        return out

    rng = np.random.default_rng(9)
    q = rng.standard_normal((128, 128), dtype=np.float32)
    k = rng.standard_normal((128, 16 * 512), dtype=np.float32)
    traced = scores.specialize((q, k))
    assert traced.instances[0].rotation["psum_evictions"] == 8
    evictions = [ins for ins in traced.instances[0].programs[0].instructions
                 if (ins.name or "").startswith("evict")]
    assert len(evictions) == 8 and {ins.opcode.name for ins in evictions} == {"TENSOR_COPY"}
    assert all(ins.srcs[0].memory is Memory.PSUM and ins.dst.memory is Memory.SBUF for ins in evictions)
    want = (q.T.astype(np.float64) @ k).reshape(128, 16, 512).max(axis=2)
    np.testing.assert_allclose(nki.simulate(scores)(q, k), want, rtol=1e-4, atol=1e-4)


def test_profile_reports_peak_on_chip_bytes():
    _, prof = nki.simulate(_scale_kernel(nl.affine_range), profile=True)(np.zeros((512, 512), np.float32))
    assert prof.summary["sbuf_peak_bytes"] == MAX_ROTATION * 512 * 4 * 128
    assert prof.summary["psum_peak_bytes"] == 0


def test_a_pinned_tile_keeps_its_address_and_others_go_around_it():
    @nki.jit
    def pinned(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        fixed = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, name="fixed", address=(0, 0))
        nisa.memset(dst=fixed, value=3.0)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128 : (i + 1) * 128, :])
            nl.store(out[i * 128 : (i + 1) * 128, :], nl.add(t, fixed))
        return out

    a = np.ones((512, 64), np.float32)
    inst = _traced(pinned, a)
    assert _addresses(inst, "fixed") == [(0, 0)]
    assert all(addr[1] >= 64 * 4 for addr in _addresses(inst, "load") + _addresses(inst, "add"))
    assert np.all(nki.simulate(pinned)(a) == 4.0)


def _big_output_kernel(rows):
    @nki.jit
    def big(a):
        out = nl.ndarray((rows, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:128, 0:512], src=a)
        return out

    return big


def test_hbm_over_the_logical_cores_capacity_is_rejected_at_trace_time():
    """A launch whose HBM tensors pass the logical core's HBM (24 GiB on trn2) is what the chip
    rejects: HbmCapacityError naming the tensor and its line, before any array is made."""
    from neuronsim.errors import HbmCapacityError

    a = np.zeros((128, 512), np.float32)
    with pytest.raises(HbmCapacityError) as err:
        _big_output_kernel(8192)(a)  # 32 GiB
    assert "24.00 GiB of HBM" in str(err.value) and "[8192x1048576] float32" in str(err.value)
    assert err.value.location.split(":")[0].endswith("test_allocation.py")


def test_a_launch_this_host_cannot_hold_fails_before_allocating(monkeypatch):
    """Within the chip's HBM but beyond the host's free memory: CapacityError, nothing allocated."""
    from neuronsim.nki import hbm

    monkeypatch.setattr(hbm, "host_available_bytes", lambda: 1 << 30)
    a = np.zeros((128, 512), np.float32)
    with pytest.raises(CapacityError, match=r"needs 2.00 GiB of host memory .* 1.00 GiB available"):
        _big_output_kernel(512)(a)  # 2 GiB
    monkeypatch.setattr(hbm, "host_available_bytes", lambda: 0)  # a busy host: a small launch still runs

    @nki.jit
    def small(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    np.testing.assert_array_equal(small(a), a)
