"""The cached native op in C++ (``device/cpp/neuron_ops.cpp``, ``device/native/fast.py``): a repeat
call runs its published launch record without Python, with the Python path's bits, clock records
and op counts; a call it does not know (another shape, dtype, stride or device, other options, a
kernel gone) runs the Python path; a run that stops raises the Python path's error. Under fast
numerics the C++ kernel calls ATen-CPU on host views as the Python path does."""

from __future__ import annotations

import gc

import pytest
import torch
from numba import njit

import neuronsim
from neuronsim.device import clock, dispatch, hbm, native, tracking
from neuronsim.device.native import fast
from neuronsim.sim import execute_numba
from neuronsim.sim.ir import Opcode

OPS = {
    "a + b": lambda a, b: a + b,
    "a * 0.5 (a wrapped number)": lambda a, b: a * 0.5,
    "a.add_(b)": lambda a, b: a.add_(b),
    "a @ b": lambda a, b: a @ b,
    "a.sum(dim=1)": lambda a, b: a.sum(dim=1),
    "max(dim) (two outputs)": lambda a, b: torch.max(a, dim=0),
    "_foreach_add_": lambda a, b: torch._foreach_add_([a, b], [b, a]),
}


def test_the_cached_op_library_is_in_use():
    assert fast.active(), "tests/conftest.py builds the cached-op library before the device registers"


@pytest.fixture(autouse=True)
def _collected():
    """Tensors a test's exceptions keep in reference cycles are freed here, not during a later test
    that reads the HBM ledger."""
    yield
    gc.collect()


def _compiled(fn, *args):
    """Run ``fn`` once with every compile unit it needs loaded in this process, then once more (the
    call that publishes its record to the C++ kernel)."""
    with neuronsim.options(executor="numba"):
        fn(*args)
    fn(*args)


def _python_then_twice_from_cpp(run):
    """``run(2)`` on the Python path, then twice served from the C++ records (hits counted)."""
    with fast.disabled():
        before = fast.hits()
        python = run(2)
        assert fast.hits() == before
    again = [run(2), run(2)]
    assert fast.hits() == before + 2
    return python, again


def _events(index: int = 0):
    return [(e.name, e.kind, e.signature, e.duration_ns, e.bytes, e.native, e.flops)
            for e in clock.clock(index).events()]


def _inputs(seed: int = 0, device: str = "neuron", dtype=torch.float32, shape=(24, 24)):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=dtype).to(device),
            torch.randn(shape, generator=g, dtype=dtype).to(device))


def _cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, list | tuple):
        return [_cpu(v) for v in value]
    return value


def _same_bits(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.uint8),
                                                                         y.view(torch.uint8))
    return len(x) == len(y) and all(_same_bits(p, q) for p, q in zip(x, y, strict=True))


@pytest.mark.parametrize("name", OPS)
def test_a_repeat_call_runs_in_cpp_with_the_python_paths_bits_clock_and_counts(name):
    fn = OPS[name]
    _compiled(fn, *_inputs(1))

    def run(seed: int):
        a, b = _inputs(seed)
        torch.neuron.synchronize()
        clock.clock(0).reset()
        tracking.clear_op_tracking()
        result = fn(a, b)
        out = _cpu(result if result is not None else [a, b])
        return out, _events(), tracking.get_op_counts()

    python, again = _python_then_twice_from_cpp(run)
    for cpp in again:
        assert _same_bits(cpp[0], python[0])
        assert cpp[1] == python[1]  # the records the profiler reads: names, kinds, simulated times
        assert cpp[2] == python[2]


@pytest.mark.parametrize("name", ["a + b", "a * 0.5 (a wrapped number)", "a.add_(b)", "a @ b",
                                  "max(dim) (two outputs)", "_foreach_add_"])
def test_fast_numerics_repeat_calls_run_aten_in_cpp_as_the_python_path_does(name):
    fn = OPS[name]
    ledger = hbm.ledger(0)
    with neuronsim.options(numerics="fast"):
        fn(*_inputs(1))

        def run(seed: int):
            a, b = _inputs(seed)
            torch.neuron.synchronize()
            clock.clock(0).reset()
            tracking.clear_op_tracking()
            held = ledger.allocated_bytes
            result = fn(a, b)
            charged = ledger.allocated_bytes - held
            out = _cpu(result if result is not None else [a, b])
            return out, _events(), tracking.get_op_counts(), charged

        python, again = _python_then_twice_from_cpp(run)
    for cpp in again:
        assert _same_bits(cpp[0], python[0])
        assert cpp[1:] == python[1:]  # clock records, op counts, HBM charged for the results
    with neuronsim.options(numerics="fast"), neuronsim.options(chip="trn3"):  # two scopes: Python only
        before = fast.hits()
        fn(*_inputs(2))
        assert fast.hits() == before


def test_a_changed_shape_dtype_stride_or_device_is_a_new_signature():
    a, b = _inputs(3)
    _compiled(torch.add, a, b)
    before = fast.hits()
    torch.add(a, b)
    assert fast.hits() == before + 1
    variants = {
        "shape": _inputs(4, shape=(24, 25)),
        "dtype": _inputs(4, dtype=torch.bfloat16),
        "stride": (a.t(), b),
        "offset view": (a[1:], b[1:]),
    }
    for label, (x, y) in variants.items():
        expected = x.cpu() + y.cpu()
        with neuronsim.options(executor="numba"):
            torch.add(x, y)  # (compile units for the new signature)
        before = fast.hits()
        first, second, third = torch.add(x, y), torch.add(x, y), torch.add(x, y)
        assert fast.hits() == before + 2, label  # the first runs in Python and publishes
        for got in (first, second, third):
            assert torch.equal(got.cpu(), expected), label

    # Another core's tensors: allocated on that core and charged to its clock.
    x, y = a.to("neuron:1"), b.to("neuron:1")
    torch.neuron.synchronize()
    charged = len(clock.clock(1).events())
    outs = [torch.add(x, y) for _ in range(3)]
    assert [e.kind for e in clock.clock(1).events()[charged:]] == ["launch", "kernel"] * 3
    assert all(o.device == torch.device("neuron:1") and torch.equal(o.cpu(), a.cpu() + b.cpu()) for o in outs)


def test_calls_it_does_not_know_run_the_python_path():
    a, b = _inputs(5)
    _compiled(torch.mul, a, b)
    before = fast.hits()
    with neuronsim.options(numerics="fast"):  # other options: records of their own (this one publishes)
        assert torch.equal(torch.mul(a, b).cpu(), a.cpu() * b.cpu())
    assert fast.hits() == before
    torch.mul(a, b)
    assert fast.hits() == before + 1

    saved = dispatch.NATIVE_KERNELS.pop(torch.ops.aten.mul.Tensor)  # the records are forgotten
    try:
        tracking.clear_op_tracking()
        assert torch.equal(torch.mul(a, b).cpu(), a.cpu() * b.cpu())
        assert fast.hits() == before + 1
        assert tracking.get_fallback_ops() == ["aten::mul.Tensor"]
    finally:
        dispatch.NATIVE_KERNELS[torch.ops.aten.mul.Tensor] = saved


def test_clearing_an_ops_entries_forgets_its_cpp_records():
    """Tests (and anyone replanning) clear an op's entries to plan its next call afresh: the C++
    record must not keep running the old plan."""
    a, b = _inputs(9)
    _compiled(torch.sub, a, b)
    before = fast.hits()
    torch.sub(a, b)
    assert fast.hits() == before + 1
    entries = native.entries("aten::sub.Tensor")
    entries.clear()
    torch.sub(a, b)
    assert fast.hits() == before + 1 and len(entries) == 1  # planned again, through Python


def test_hbm_capacity_is_the_options_in_effect():
    a, b = _inputs(7)
    _compiled(torch.sub, a, b)
    capacity = hbm.ledger(0).allocated_bytes + 8 * a.nbytes
    for _ in range(2):
        with neuronsim.options(hbm_bytes=capacity):
            torch.sub(a, b)  # (published under these options, then run from the record)
        torch.sub(a, b), torch.sub(a, b)  # the environment's options: their own capacity
    _compiled(torch.mul, a, b)  # the last publish is the environment's: its capacity is set last
    with neuronsim.options(hbm_bytes=capacity):
        before = fast.hits()
        torch.sub(a, b)
        assert fast.hits() == before + 1
        room = capacity - hbm.ledger(0).allocated_bytes
        filler = torch.empty((room - a.nbytes // 2) // 4, device="neuron")  # less room than one output
        with pytest.raises(torch.OutOfMemoryError):
            torch.sub(a, b)
        del filler


def test_a_long_run_of_hits_nothing_reads_is_charged_in_full():
    a, b = _inputs(8)
    _compiled(torch.add, a, b)
    torch.neuron.synchronize()
    clock.clock(0).reset()
    tracking.clear_op_tracking()
    n = 250
    fast.set_queue_limit(100)  # (past it, calls go through Python, whose charge drains the queue)
    try:
        for _ in range(n):
            torch.add(a, b)
    finally:
        fast.set_queue_limit()
    assert tracking.get_op_counts()["executed"] == {"aten::add.Tensor": n}
    kernels = [e for e in clock.clock(0).events() if e.kind == "kernel"]
    assert len(kernels) == min(n, clock.clock(0)._records.maxlen)
    assert [e.start_ns for e in kernels] == sorted(e.start_ns for e in kernels)


@njit(cache=False)
def _raising_kernel(row, frow, bases):
    if row[0] >= 0:
        raise ValueError("a kernel bug")


def test_a_run_that_stops_raises_the_python_paths_error():
    a, b = _inputs(6)
    _compiled(lambda x, y: x.add_(y), a, b)
    _raising_kernel.compile(execute_numba.KERNEL_ARGS)
    saved = execute_numba.ENTRIES[Opcode.TENSOR_TENSOR]
    execute_numba.ENTRIES[Opcode.TENSOR_TENSOR] = execute_numba.entry_address(_raising_kernel)
    try:
        with fast.disabled(), pytest.raises(RuntimeError) as python:
            a.add_(b)
        before = fast.hits()
        with pytest.raises(RuntimeError) as cpp:
            a.add_(b)
        assert fast.hits() == before  # it stopped: not a completed call
    finally:
        execute_numba.ENTRIES[Opcode.TENSOR_TENSOR] = saved
    assert "TENSOR_TENSOR kernel raised" in str(python.value) and str(cpp.value) == str(python.value)
    assert type(cpp.value.__cause__) is type(python.value.__cause__)
