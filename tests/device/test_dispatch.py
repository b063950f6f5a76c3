"""The op chokepoint: native-kernel registry first, host fallback otherwise; op tracking and the
device clock's entries (launch, to_host, to_device) charged from the chip data."""

from __future__ import annotations

import pytest
import torch

import neuronsim
from neuronsim.device import clock, dispatch
from neuronsim.device.memory import adopt, host_view
from neuronsim.sim.chips import get_chip

aten = torch.ops.aten


def _events_of(fn):
    device_clock = clock.clock(0)
    before = len(device_clock.events())
    start = device_clock.now_ns
    fn()
    return device_clock.events()[before:], device_clock.now_ns - start


def test_every_op_falls_back_to_the_host_when_no_native_kernel_is_registered(no_native_kernels):
    a = torch.ones(4, device="neuron")
    torch.neuron.clear_op_tracking()
    (a + a).sum()
    assert torch.neuron.get_fallback_ops() == ["aten::add.Tensor", "aten::sum.dim_IntList"]
    assert torch.neuron.get_executed_ops() == []
    torch.neuron.clear_op_tracking()
    assert torch.neuron.get_fallback_ops() == [] and torch.neuron.get_executed_ops() == []


def test_fallback_is_charged_launch_and_a_host_round_trip_from_the_chip(no_native_kernels):
    chip = get_chip("trn2")
    a = torch.ones(256, device="neuron")
    b = torch.ones(256, device="neuron")
    events, elapsed = _events_of(lambda: a + b)
    assert [e.kind for e in events] == ["launch", "to_host", "to_device"]
    launch, to_host, to_device = events
    assert all(e.name == "aten::add.Tensor" and not e.native for e in events)
    assert launch.duration_ns == chip.kernel_launch_overhead_ns
    per_byte = 1e9 / chip.host_link_bandwidth_bytes_per_s
    assert to_host.bytes == 2 * 1024 and to_device.bytes == 1024
    assert to_host.duration_ns == pytest.approx(chip.host_round_trip_latency_ns / 2 + 2048 * per_byte)
    assert to_device.duration_ns == pytest.approx(chip.host_round_trip_latency_ns / 2 + 1024 * per_byte)
    assert to_host.start_ns == launch.start_ns + launch.duration_ns
    assert to_device.start_ns == to_host.start_ns + to_host.duration_ns
    assert elapsed == pytest.approx(sum(e.duration_ns for e in events))
    assert launch.signature == ((torch.float32, torch.Size([256])), (torch.float32, torch.Size([256])))


def test_transfers_views_and_item():
    host = torch.ones(100)
    events, _ = _events_of(lambda: host.to("neuron"))
    assert [(e.kind, e.bytes) for e in events] == [("h2d", 400)]
    t = torch.ones(100, device="neuron")
    events, elapsed = _events_of(lambda: (t.view(10, 10), t[3:5], t.t() if t.dim() == 2 else t.unsqueeze(0)))
    assert events == [] and elapsed == 0, "metadata ops do no device work"
    events, _ = _events_of(lambda: t.cpu())
    assert [(e.kind, e.bytes) for e in events] == [("d2h", 400)]
    events, _ = _events_of(lambda: t[0].item())
    assert [(e.kind, e.bytes) for e in events] == [("d2h", 4)]


def test_costs_follow_the_selected_chip():
    a = torch.ones(8, device="neuron")
    with neuronsim.options(chip="trn3"):
        events, _ = _events_of(lambda: a * 2)
    assert events[0].duration_ns == get_chip("trn3").kernel_launch_overhead_ns


def test_timing_is_the_same_every_run():
    def step():
        x = torch.ones(32, 32, device="neuron")
        events = _events_of(lambda: (x @ x).relu().sum())[0]
        return [(e.name, e.kind, e.duration_ns) for e in events]

    # Bit-identical per op (the clock's absolute time is a running float sum, so differences of
    # it taken at other offsets may round differently).
    first = step()
    assert first and first == step()


def _native_add(op, args, kwargs):
    a, b = args[0], args[1]
    if a.dtype != torch.float32:
        return NotImplemented
    result = adopt(torch.add(host_view(a), host_view(b), **kwargs), a.get_device())
    clock.clock(a.get_device()).charge_kernel(op.name(), ((a.dtype, a.shape),), 123.0, a.nbytes * 3)
    return result


@pytest.fixture
def native_add():
    previous = dispatch.NATIVE_KERNELS.get(aten.add.Tensor)
    dispatch.register_native_kernel(aten.add.Tensor, _native_add)
    torch.neuron.clear_op_tracking()
    yield
    dispatch.unregister_native_kernel(aten.add.Tensor)
    if previous is not None:
        dispatch.register_native_kernel(aten.add.Tensor, previous)


def test_registered_native_kernel_is_consulted_first(native_add):
    a = torch.full((4,), 2.0, device="neuron")
    torch.neuron.clear_op_tracking()
    events, _ = _events_of(lambda: a + a)
    assert [(e.kind, e.native) for e in events] == [("launch", True), ("kernel", True)]
    assert events[1].duration_ns == 123.0
    assert torch.neuron.get_executed_ops() == ["aten::add.Tensor"]
    assert torch.neuron.get_fallback_ops() == []
    assert torch.neuron.get_op_counts()["executed"] == {"aten::add.Tensor": 1}


def test_native_kernel_can_decline_a_signature(native_add):
    ints = torch.ones(4, dtype=torch.int32, device="neuron")
    torch.neuron.clear_op_tracking()
    assert (ints + ints).cpu().tolist() == [2, 2, 2, 2]
    assert torch.neuron.get_fallback_ops() == ["aten::add.Tensor"]
    assert torch.neuron.get_executed_ops() == []


def test_clock_ring_keeps_the_newest_records():
    device_clock = clock.DeviceClock(7, capacity=2)
    for i in range(5):
        device_clock.charge_transfer(f"op{i}", (), 8, to_device=True)
    assert [e.name for e in device_clock.events()] == ["op3", "op4"]
    assert device_clock.host_bytes_to_device == 40
    device_clock.reset()
    assert device_clock.events() == [] and device_clock.now_ns == 0


def test_the_registry_by_name_follows_every_change_to_the_op_keyed_table(no_native_kernels):
    """The chokepoint looks kernels up by op name (``OpOverload.__hash__`` is Python): the name
    table must follow registration, removal, clear and update of the op-keyed one."""
    registry = dispatch.NATIVE_KERNELS

    def kernel(op, args, kwargs):
        return NotImplemented

    dispatch.register_native_kernel(aten.mul.Tensor, kernel)
    assert registry.by_name == {"aten::mul.Tensor": kernel}
    saved = dict(registry)
    dispatch.unregister_native_kernel(aten.mul.Tensor)
    assert registry.by_name == {}
    registry.update(saved)
    assert registry.by_name == {"aten::mul.Tensor": kernel}
    a = torch.ones(3, device="neuron")
    torch.neuron.clear_op_tracking()
    a * a  # the kernel declines: the host computes it
    assert torch.neuron.get_fallback_ops() == ["aten::mul.Tensor"]
    del registry[aten.mul.Tensor]
    assert registry.by_name == {}
