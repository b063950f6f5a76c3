"""A cached native op's launch record (``device/native/entry.py``): a repeat call of a signature
runs the compiled loop directly, gives the bits the general path gives, starts a new entry when the
signature changes, and is still charged to the clock and counted like every op."""

from __future__ import annotations

import threading

import pytest
import torch

import neuronsim
from neuronsim.device import clock, hbm, native, settings
from neuronsim.sim import execute_numba
from neuronsim.sim.ir import Opcode

ADD = "aten::add.Tensor"


def _entry_for(name: str, *shape_dtype_stride):
    entries = [e for k, e in native.entries(name).items()
               if not native.is_declined(e) and shape_dtype_stride in k[2]]
    (entry,) = entries
    return entry


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().view(torch.int32)


@pytest.fixture
def compiled():
    """The Numba executor compiling in place (no reference tier): the record is ready after one call."""
    with neuronsim.options(executor="numba"):
        yield


def test_a_repeat_call_runs_the_launch_record_with_the_same_bits(compiled, monkeypatch):
    a = torch.randn(19, 7, device="neuron")
    b = torch.randn(19, 7, device="neuron")
    first = a + b
    entry = _entry_for(ADD, torch.float32, torch.Size([19, 7]), (7, 1))
    assert entry._runner is not None  # every compile unit it uses is loaded: the record is complete

    def general_path(*args, **kwargs):
        raise AssertionError("a cached signature went through the general executor path")

    monkeypatch.setattr(execute_numba, "execute", general_path)
    again = a + b
    monkeypatch.undo()
    with neuronsim.options(executor="reference"):
        reference = a + b
    assert torch.equal(_bits(again), _bits(first)) and torch.equal(_bits(again), _bits(reference))
    assert torch.equal(again.cpu(), a.cpu() + b.cpu())


def test_a_changed_shape_dtype_or_stride_gets_its_own_entry(compiled):
    a = torch.randn(8, 12)
    b = torch.randn(8, 12)
    cases = {
        "base": (a, b),
        "shape": (a[:5], b[:5]),
        "dtype": ((a * 100).int(), (b * 100).int()),
        "stride": (a.t(), b.t()),
    }
    cache = native.entries(ADD)
    before = len(cache)
    for name, (x, y) in cases.items():
        for _ in range(2):  # the second call of each runs its launch record
            got = x.to("neuron") + y.to("neuron")
            assert torch.equal(got.cpu(), x + y), name
            assert got.stride() == (x + y).stride(), name
    assert len(cache) - before == len(cases)


def test_another_device_index_reuses_the_record_but_allocates_and_charges_there(compiled):
    a0 = torch.randn(6, 10, device="neuron:0")
    b0 = torch.randn(6, 10, device="neuron:0")
    a0 + b0  # the signature's entry and its record
    a1, b1 = a0.to("neuron:1"), b0.to("neuron:1")
    before = (len(clock.clock(1).events()), hbm.ledger(1).allocated_bytes)
    out = a1 + b1
    events = clock.clock(1).events()[before[0]:]
    assert [(e.name, e.kind) for e in events] == [(ADD, "launch"), (ADD, "kernel")]
    assert hbm.ledger(1).allocated_bytes - before[1] == out.untyped_storage().nbytes()
    assert out.device == torch.device("neuron:1")
    assert torch.equal(out.cpu(), a0.cpu() + b0.cpu())


def test_threads_each_keep_their_cores_base_addresses(compiled):
    """Threads model separate cores (the autograd thread runs the backward): an entry keeps each
    core's base addresses, and each thread's runs use its own."""
    a = torch.randn(5, 11, device="neuron")
    b = torch.randn(5, 11, device="neuron")
    results = [a + b]
    worker = threading.Thread(target=lambda: results.append(a + b))
    worker.start()
    worker.join()
    results.append(a + b)
    entry = _entry_for(ADD, torch.float32, torch.Size([5, 11]), (11, 1))
    assert len(entry._bases) == 2  # the main thread's core and the worker's
    expected = a.cpu() + b.cpu()
    assert len(results) == 3 and all(torch.equal(r.cpu(), expected) for r in results)


def test_every_cached_call_is_charged_and_counted(compiled):
    a = torch.randn(4, 9, device="neuron")
    b = torch.randn(4, 9, device="neuron")
    a + b
    entry = _entry_for(ADD, torch.float32, torch.Size([4, 9]), (9, 1))
    clk = clock.clock(0)
    clk.reset()
    torch.neuron.clear_op_tracking()
    for _ in range(5):
        a + b
    kernels = [e for e in clk.events() if e.kind == "kernel"]
    assert len(kernels) == 5 and torch.neuron.get_op_counts()["executed"] == {ADD: 5}
    for e in kernels:
        assert (e.name, e.duration_ns, e.kernel, e.flops) == (
            ADD, entry.duration_ns, entry.prepared, entry.flops)
        assert e.signature == ((torch.float32, torch.Size([4, 9])),) * 2
    assert clk.now_ns == pytest.approx(5 * (entry.duration_ns + settings.chip().kernel_launch_overhead_ns))


def test_a_unit_unloaded_after_the_record_was_made_resumes_where_it_stopped(compiled, monkeypatch):
    a = torch.randn(16, 16, device="neuron")
    b = torch.randn(16, 16, device="neuron")
    a.add_(b)  # in place: running a prefix twice would add b twice
    entry = _entry_for("aten::add_.Tensor", torch.float32, torch.Size([16, 16]), (16, 1))
    first_add = [i.opcode for i in entry.program.instructions].index(Opcode.TENSOR_TENSOR)
    expected = a.cpu() + b.cpu()
    starts = []
    general = execute_numba.execute

    def resumed(*args, start=0, **kwargs):
        starts.append(start)
        return general(*args, start=start, **kwargs)

    monkeypatch.setattr(execute_numba, "execute", resumed)
    saved = execute_numba.ENTRIES[Opcode.TENSOR_TENSOR]
    execute_numba.ENTRIES[Opcode.TENSOR_TENSOR] = 0
    try:
        a.add_(b)
    finally:
        execute_numba.ENTRIES[Opcode.TENSOR_TENSOR] = saved
    assert starts == [first_add] and first_add > 0
    assert torch.equal(a.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64])
@pytest.mark.parametrize("size", [(), (1,), (3, 1), (1, 4, 1), (2, 3, 5)])
def test_fresh_contiguous_device_memory_has_torchs_layout_and_is_charged(dtype, size):
    from neuronsim.device import memory

    expected = torch.empty(size, dtype=dtype)
    ledger = hbm.ledger(0)
    before = ledger.allocated_bytes
    t = memory.empty_strided(size, expected.stride(), dtype, 0, expected.nbytes)
    assert (t.device, t.dtype, t.shape, t.stride()) == (torch.device("neuron:0"), dtype, expected.shape,
                                                        expected.stride())
    assert ledger.allocated_bytes - before == t.untyped_storage().nbytes() == expected.nbytes
    t.fill_(1)
    assert torch.equal(t.cpu(), torch.ones(size, dtype=dtype))
    del t
    assert ledger.allocated_bytes == before
