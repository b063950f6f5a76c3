"""Simulated HBM: accounting, CUDA-style statistics, and out-of-memory behaviour."""

from __future__ import annotations

import gc

import pytest
import torch

import neuronsim
from neuronsim import env
from neuronsim.device import hbm, memory
from neuronsim.device.hbm import LARGE_POOL_MIN_BYTES
from neuronsim.errors import HbmCapacityError
from neuronsim.options import from_environment

MiB = 1 << 20


def test_allocation_and_free_are_accounted():
    gc.collect()
    before = torch.neuron.memory_allocated()
    t = torch.empty(1000, dtype=torch.float32, device="neuron")
    assert torch.neuron.memory_allocated() == before + 4000
    view = t[10:20]
    assert torch.neuron.memory_allocated() == before + 4000, "views share storage"
    del t
    assert torch.neuron.memory_allocated() == before + 4000, "the view keeps the storage alive"
    del view
    assert torch.neuron.memory_allocated() == before


def test_op_results_are_accounted():
    a = torch.ones(256, device="neuron")
    before = torch.neuron.memory_allocated()
    b = a * 2
    assert torch.neuron.memory_allocated() == before + b.nbytes
    del b
    assert torch.neuron.memory_allocated() == before


def test_peak_and_reset():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    t = torch.empty(MiB, dtype=torch.uint8, device="neuron")
    del t
    assert torch.neuron.max_memory_allocated() >= base + MiB
    assert torch.neuron.max_memory_reserved() >= base + MiB
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()


def test_memory_stats_use_cuda_style_flat_keys():
    large = torch.empty(LARGE_POOL_MIN_BYTES, dtype=torch.uint8, device="neuron")
    small = torch.empty(8, device="neuron")
    stats = torch.neuron.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.large_pool.allocated",
        "allocated_bytes.small_pool.freed",
        "reserved_bytes.all.current",
        "active_bytes.all.current",
        "allocation.all.current",
        "num_ooms",
        "num_alloc_retries",
    ):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
    assert stats["allocated_bytes.large_pool.current"] >= LARGE_POOL_MIN_BYTES
    assert stats["allocated_bytes.small_pool.current"] >= 32
    reserved, allocated = stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"]
    assert reserved >= allocated >= stats["active_bytes.all.current"]
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()
    assert list(stats) == sorted(stats)
    del large, small


def test_each_pool_counts_its_own_bytes_counts_and_peaks():
    """A private ledger, so other tests' storages do not move the numbers: every metric of every
    pool, through charges, a free and a refused charge."""
    ledger = hbm.HbmLedger(99)
    large = torch.empty(LARGE_POOL_MIN_BYTES, dtype=torch.uint8).untyped_storage()
    small = torch.empty(10).untyped_storage()
    small2 = torch.empty(3).untyped_storage()
    ledger.charge(large)
    ledger.charge(small)
    ledger.charge(small2)
    ledger.charge(torch.empty(0).untyped_storage())  # nothing to charge
    del small2
    gc.collect()

    def row(name, pool):
        stats = ledger.stats()
        return [stats[f"{name}.{pool}.{m}"] for m in ("current", "peak", "allocated", "freed")]

    big = LARGE_POOL_MIN_BYTES
    assert row("allocated_bytes", "all") == [big + 40, big + 52, big + 52, 12]
    assert row("allocated_bytes", "large_pool") == [big, big, big, 0]
    assert row("allocated_bytes", "small_pool") == [40, 52, 52, 12]
    assert row("allocation", "all") == [2, 3, 3, 1]
    assert row("allocation", "large_pool") == [1, 1, 1, 0]
    assert row("allocation", "small_pool") == [1, 2, 2, 1]
    with neuronsim.options(hbm_bytes=big + 50):
        with pytest.raises(HbmCapacityError):
            ledger.charge(torch.empty(4).untyped_storage())
    assert row("allocated_bytes", "all") == [big + 40, big + 52, big + 52, 12], \
        "a refused charge changes nothing"
    assert ledger.stats()["num_ooms"] == 1
    del large
    gc.collect()
    assert row("allocated_bytes", "all") == [40, big + 52, big + 52, big + 12]
    assert row("allocation", "large_pool") == [0, 1, 1, 1]
    ledger.reset_peak()
    assert row("allocated_bytes", "all")[1] == 40
    del small


@pytest.mark.parametrize("size, stride", [((3, 4), (1, 3)), ((2, 3), (8, 2)), ((5, 2), (0, 1)),
                                          ((0, 3), (3, 1)), ((), ())])
def test_fresh_device_memory_of_any_layout_is_charged_and_released_on_any_thread(size, stride):
    """Fresh storages come from the device's C++ library: torch's layout, the view's extent charged,
    and the bytes given back when the storage dies, also on another thread (autograd's)."""
    import threading

    gc.collect()
    before = torch.neuron.memory_allocated()
    t = memory.empty_strided(size, stride, torch.float32, 0)
    assert (t.device, t.shape, t.stride(), t.storage_offset()) == (torch.device("neuron:0"), size, stride, 0)
    nbytes = memory.storage_bytes(size, stride, torch.float32)
    assert t.untyped_storage().nbytes() == nbytes
    assert torch.neuron.memory_allocated() == before + nbytes
    holder = [t]
    del t
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()
    assert torch.neuron.memory_allocated() == before


def test_peaks_are_of_the_total_of_storages_made_in_cpp_and_adopted_in_python():
    gc.collect()
    before = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    made = memory.empty((1000,), torch.float32, 0)  # the C++ route
    adopted = memory.adopt(torch.ones(500), 0)  # a CPU tensor's storage, released by a weakref
    assert torch.neuron.max_memory_allocated() == before + 6000
    del made
    assert torch.neuron.memory_allocated() == before + 2000
    assert torch.neuron.max_memory_allocated() == before + 6000
    del adopted
    gc.collect()
    assert torch.neuron.memory_allocated() == before


@pytest.mark.parametrize("seed", range(3))
def test_storage_bytes_is_the_extent_of_the_view(seed):
    """Bytes from the first to one past the last element, 0 for an empty view: as the strided
    span of a host tensor of the same sizes and strides (zero, broadcast and gapped strides)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(200):
        dims = int(torch.randint(0, 4, (), generator=g))
        size = torch.randint(0, 4, (dims,), generator=g).tolist()
        stride = torch.randint(0, 7, (dims,), generator=g).tolist()
        dtype = (torch.float32, torch.float16, torch.int64)[int(torch.randint(0, 3, (), generator=g))]
        t = torch.empty_strided(size, stride, dtype=dtype)
        span = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
        expected = 0 if t.numel() == 0 else span * dtype.itemsize
        assert memory.storage_bytes(size, stride, dtype) == expected, (size, stride, dtype)
        assert t.untyped_storage().nbytes() == expected  # ATen allocates the same extent


def test_host_view_and_adopt_share_bytes_and_keep_them_alive():
    host = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:3]
    device = memory.adopt(host.clone(), 0)
    assert device.device.type == "neuron" and device.shape == (3, 2)
    view = memory.host_view(device)
    assert view.device.type == "cpu" and view.stride() == device.stride()
    assert view.data_ptr() == device.data_ptr()
    del device
    gc.collect()
    assert torch.equal(view, host), "the host view keeps the device storage alive"
    view[0, 0] = -1.0
    assert memory.host_view(memory.adopt(view, 0))[0, 0] == -1.0


def test_reset_accumulated_stats():
    torch.empty(16, device="neuron")
    torch.neuron.reset_accumulated_memory_stats()
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0


def test_memory_summary_and_empty_cache():
    summary = torch.neuron.memory_summary()
    assert "Neuron Memory Summary, Device 0" in summary
    assert "Allocated memory" in summary
    assert "Neuron Memory Summary, Device 1" in torch.neuron.memory_summary(1, abbreviated=True)
    torch.neuron.empty_cache()


def test_each_logical_core_has_its_own_hbm():
    before0, before1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = torch.empty(100, device="neuron:1")
    assert torch.neuron.memory_allocated(1) == before1 + 400
    assert torch.neuron.memory_allocated(0) == before0
    del t


def test_out_of_memory_raises_torch_oom_with_cuda_like_message_and_keeps_tensors():
    gc.collect()
    allocated = torch.neuron.memory_allocated()
    capacity = allocated + 4 * MiB
    with neuronsim.options(hbm_bytes=capacity):
        kept = [torch.full((MiB // 4,), float(i), device="neuron") for i in range(3)]  # 3 MiB
        ooms = torch.neuron.memory_stats()["num_ooms"]
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(2 * MiB, dtype=torch.uint8, device="neuron")
        message = str(info.value)
        assert "out of memory" in message
        assert f"Tried to allocate 2.00 MiB ({2 * MiB} bytes)" in message
        assert f"({capacity} bytes)" in message
        assert f"({allocated + 3 * MiB} bytes) is allocated" in message
        assert env.NEURON_SIM_HBM_BYTES in message
        assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
        # The failed allocation changed nothing; earlier tensors are intact.
        assert torch.neuron.memory_allocated() == allocated + 3 * MiB
        for i, t in enumerate(kept):
            assert torch.equal(t.cpu(), torch.full((MiB // 4,), float(i)))
        with pytest.raises(torch.OutOfMemoryError):
            kept[0] * kept[1] * kept[2]  # an op result past the budget
        with pytest.raises(torch.OutOfMemoryError):
            kept[0].resize_(2 * MiB)  # growing a storage
        assert torch.equal(kept[0].cpu(), torch.zeros(MiB // 4))
        del kept[1]
        torch.ones(MiB // 4, device="neuron")  # freed memory is usable again


def test_oom_for_a_huge_request_does_not_touch_host_memory():
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 50, dtype=torch.uint8, device="neuron")


def test_capacity_override_from_the_environment():
    assert from_environment({env.NEURON_SIM_HBM_BYTES: "12345"}).hbm_bytes == 12345
    assert from_environment({}).hbm_bytes is None
    with pytest.raises(ValueError):
        from_environment({env.NEURON_SIM_HBM_BYTES: "lots"})


def test_mem_get_info():
    free, total = torch.neuron.mem_get_info()
    assert total == torch.neuron.get_device_properties().total_memory
    assert free == total - torch.neuron.memory_allocated()
