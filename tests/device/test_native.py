"""The native-op runtime (neuronsim/device/native): lazy registration, the per-signature cache,
declines, in-place aliasing, the clock's records, fast numerics and the HBM ledger."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
import torch

import neuronsim
from neuronsim import env
from neuronsim.device import clock, dispatch, hbm, native
from neuronsim.device.native.op import NativeOp
from neuronsim.kernels import op_overload, registry
from neuronsim.kernels.manifest import FAMILIES
from neuronsim.profiler import from_clock_events
from neuronsim.profiler.summary import device_summary
from neuronsim.sim.chips import get_chip

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fresh_op_tracking():
    torch.neuron.clear_op_tracking()


def test_import_torch_registers_the_device_without_loading_a_kernel_family():
    code = ("import sys, torch; assert torch.neuron.is_available(); "
            "print(sorted(m for m in sys.modules if m.startswith('neuronsim.kernels.')))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, env.NEURON_SIM: "1"},
                         capture_output=True, text=True, check=True).stdout
    # the declarative parts the device registers from, none of the families (their kernels load NKI)
    assert out.split() == ["['neuronsim.kernels.composites',", "'neuronsim.kernels.manifest',",
                           "'neuronsim.kernels.registry']"]


def test_a_familys_first_call_puts_native_ops_in_place_of_its_stubs():
    torch.ones(3, device="neuron") * 2
    for name in FAMILIES["neuronsim.kernels.elementwise"]:
        kernel = dispatch.NATIVE_KERNELS[op_overload(name)]
        assert isinstance(kernel, NativeOp) and kernel.planner is registry.TABLE[name].planner, name


def test_unknown_runtime_argument_is_a_registration_error():
    op = torch.ops.aten._foreach_mul_.Scalar
    with pytest.raises(ValueError, match="not in its schema"):
        NativeOp(op, lambda call: None, runtime=("lr",))


def test_a_signature_is_traced_once_and_reused():
    a = torch.randn(37, 5, device="neuron")
    b = torch.randn(37, 5, device="neuron")
    cache = native.entries("aten::add.Tensor")
    before = len(cache)
    for _ in range(3):
        a + b
    assert len(cache) == before + 1
    a[:, :3] + b[:, :3]  # other strides: another signature
    assert len(cache) == before + 2
    entry = next(e for e in cache.values() if not native.is_declined(e) and e.output_specs[0][0] == (37, 5))
    assert entry.traced.instructions > 0 and entry.prepared.timeline.total_ns > 0


def test_a_signatures_first_call_collects_young_objects_less_often_and_restores_it(monkeypatch):
    seen = []
    build = NativeOp._build

    def spying(self, args, kwargs):
        seen.append(gc.get_threshold())
        return build(self, args, kwargs)

    monkeypatch.setattr(NativeOp, "_build", spying)
    saved = gc.get_threshold()
    a = torch.randn(41, 7, device="neuron")
    try:
        gc.set_threshold(700, 10, 10)
        a * 3.5
        assert seen and all(t == (50_000, 10, 10) for t in seen)  # while building
        assert gc.get_threshold() == (700, 10, 10)  # put back after
        built = len(seen)
        gc.set_threshold(0, 10, 10)  # automatic collection off: it stays off
        a - 1.5
        assert len(seen) > built and all(t == (0, 10, 10) for t in seen[built:])
        assert gc.get_threshold() == (0, 10, 10)

        def failing(self, args, kwargs):
            raise RuntimeError("planner failed")

        gc.set_threshold(700, 10, 10)
        monkeypatch.setattr(NativeOp, "_build", failing)
        with pytest.raises(RuntimeError, match="planner failed"):
            a / 2.5
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*saved)


def test_uncovered_signatures_fall_back_and_the_answer_is_cached():
    x = torch.arange(12, dtype=torch.int16, device="neuron")  # no kernel covers 16-bit integers
    torch.neuron.clear_op_tracking()
    x + x
    assert torch.neuron.get_fallback_ops() == ["aten::add.Tensor"]
    declined = [e for e in native.entries("aten::add.Tensor").values() if native.is_declined(e)]
    assert declined


def test_invalid_arguments_raise_torchs_own_error():
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")


def test_in_place_ops_write_self_and_handle_self_aliases():
    base = torch.randn(64, 33)
    x = base.to("neuron")
    y = x.add_(x)
    assert y is x
    torch.testing.assert_close(x.cpu(), base + base)
    expected = x.cpu()
    expected[:, 1:].add_(expected[:, :-1])
    torch.neuron.clear_op_tracking()
    x[:, 1:].add_(x[:, :-1])  # reads what it writes through another view: the host computes it
    assert torch.neuron.get_fallback_ops() == ["aten::add_.Tensor"]
    assert torch.equal(x.cpu(), expected)


def test_native_ops_charge_their_schedule_and_launch_to_the_clock():
    chip = get_chip("trn2")
    a = torch.randn(256, 128, device="neuron")
    device_clock = clock.clock(0)
    before = len(device_clock.events())
    start = device_clock.now_ns
    a * a
    records = device_clock.events()[before:]
    assert [(r.kind, r.native) for r in records] == [("launch", True), ("kernel", True)]
    launch, kernel = records
    assert launch.duration_ns == chip.kernel_launch_overhead_ns
    prepared = kernel.kernel
    assert kernel.duration_ns == prepared.timeline.total_ns
    assert kernel.bytes == 3 * a.nbytes
    assert kernel.wall_ns is not None and kernel.engine_busy_ns["vector"] > 0
    assert device_clock.now_ns - start == pytest.approx(launch.duration_ns + kernel.duration_ns)
    ops = from_clock_events(records)
    assert len(ops) == 1 and ops[0].kernel is not None and ops[0].kernel.program is prepared.program
    summary = device_summary(ops, chip)
    assert summary["vector_engine_active_time"] > 0 and summary["kernel_launch_time"] > 0
    assert clock.all_clocks()[0] is device_clock


def test_outputs_are_charged_to_the_hbm_ledger():
    a = torch.randn(1024, 256, device="neuron")
    ledger = hbm.ledger(0)
    before = ledger.allocated_bytes
    c = a + a
    assert ledger.allocated_bytes == before + c.nbytes
    del c


def test_fast_numerics_keep_the_programs_time_and_give_atens_values():
    base = torch.randn(200, 300)
    a = base.to("neuron")
    device_clock = clock.clock(0)

    def timed():
        before = len(device_clock.events())
        out = a.exp()
        return out, [r.duration_ns for r in device_clock.events()[before:]]

    exact, exact_times = timed()
    with neuronsim.options(numerics="fast"):
        fast, fast_times = timed()
    assert fast_times == exact_times
    assert torch.equal(fast.cpu(), base.exp())
    torch.testing.assert_close(exact.cpu(), base.exp())
    assert torch.neuron.get_fallback_ops() == []


def test_the_reference_executor_gives_the_same_bits():
    a = torch.randn(130, 70, device="neuron")
    b = torch.randn(70, device="neuron")
    numba = (a * b).cpu()
    with neuronsim.options(executor="reference"):
        reference = (a * b).cpu()
    assert torch.equal(numba, reference)


def test_same_inputs_same_bits_and_times():
    torch.manual_seed(0)
    a = torch.randn(300, 90, device="neuron")
    runs = [(torch.tanh(a) - a * 0.5).cpu() for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
