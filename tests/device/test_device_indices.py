"""Every ``neuron:i`` below ``device_count()`` is a device: tensors, autograd, streams, events, RNG
and memory statistics, each index its own logical NeuronCore (clock, HBM ledger, generator)."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

from neuronsim.device import clock, settings


def test_device_count_is_the_logical_cores_of_an_instance():
    chip = settings.chip()
    assert torch.neuron.device_count() == chip.logical_cores_per_chip * 16  # a trn2.48xlarge: 64
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    last = torch.neuron.device_count() - 1
    assert torch.ones(1, device=f"neuron:{last}").device.index == last
    with pytest.raises(ValueError, match="Invalid device id"):
        torch.neuron.set_device(torch.neuron.device_count())
    with pytest.raises(RuntimeError, match="Invalid device id"):
        torch.accelerator.set_device_index(torch.neuron.device_count())


def test_backward_on_neuron_1_matches_cpu():
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 2))
    model = copy.deepcopy(reference).to("neuron:1")
    x = torch.randn(5, 6)
    reference(x).square().mean().backward()
    model(x.to("neuron:1")).square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert p.grad.device == torch.device("neuron", 1)
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6)


def test_the_autograd_thread_of_a_device_runs_on_that_device():
    seen = []
    x = torch.ones(3, device="neuron:2", requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(torch.neuron.current_device()))
    y.sum().backward()
    assert seen == [2] and torch.neuron.current_device() == 0


def test_set_device_selects_the_default_index_for_this_thread_only():
    torch.neuron.set_device(1)
    assert torch.ones(1, device="neuron").device == torch.device("neuron", 1)
    assert torch.accelerator.current_device_index() == 1
    other = []
    worker = threading.Thread(target=lambda: other.append(torch.neuron.current_device()))
    worker.start()
    worker.join()
    assert other == [0]  # as with CUDA, a new thread starts on device 0
    with torch.neuron.device(3):
        assert torch.empty(1, device="neuron").device.index == 3
    assert torch.neuron.current_device() == 1


def test_each_index_has_its_own_clock_and_hbm():
    before = {i: (clock.clock(i).now_ns, torch.neuron.memory_allocated(i)) for i in (0, 1)}
    x = torch.ones(1024, device="neuron:1")
    y = x * 3
    assert clock.clock(1).now_ns > before[1][0] and clock.clock(0).now_ns == before[0][0]
    assert torch.neuron.memory_allocated(1) - before[1][1] == 2 * 4096
    assert torch.neuron.memory_allocated(0) == before[0][1]
    assert torch.neuron.memory_stats("neuron:1")["allocation.all.current"] >= 2
    del x, y


def test_streams_and_events_belong_to_their_index():
    stream = torch.neuron.Stream(device="neuron:1")
    assert stream.device == torch.device("neuron", 1) and stream != torch.neuron.default_stream(1)
    with torch.neuron.stream(stream):
        assert torch.neuron.current_stream(1) == stream
        assert torch.neuron.current_stream(0) == torch.neuron.default_stream(0)
    assert torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    s1 = torch.neuron.default_stream(1)
    x = torch.ones(4096, device="neuron:1")
    t0 = clock.clock(1).now_ns
    start.record(s1)
    _ = torch.ones(4096, device="neuron:0") * 2  # another core: not in the interval
    x = x * 2
    end.record(s1)
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx((clock.clock(1).now_ns - t0) / 1e6)


def test_each_index_has_its_own_generator():
    torch.manual_seed(7)  # seeds every device
    a0, a1 = torch.randn(4, device="neuron:0"), torch.randn(4, device="neuron:1")
    torch.testing.assert_close(a0.cpu(), a1.cpu())
    state = torch.neuron.get_rng_state("neuron:1")
    b1 = torch.randn(4, device="neuron:1")
    torch.randn(4, device="neuron:0")  # draws on core 0 leave core 1's stream alone
    torch.neuron.set_rng_state(state, "neuron:1")
    torch.testing.assert_close(torch.randn(4, device="neuron:1").cpu(), b1.cpu())


def test_ops_mixing_two_indices_fail_as_on_cuda():
    a, b = torch.ones(3, device="neuron:0"), torch.ones(3, device="neuron:1")
    with pytest.raises(RuntimeError, match="neuron:0 and neuron:1"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a.view(3, 1), b.view(1, 3))


def test_copies_between_indices_are_charged_to_both_cores():
    a = torch.arange(6.0, device="neuron:0")
    events = {i: len(clock.clock(i).events()) for i in (0, 1)}
    b = a.to("neuron:1")
    kinds = {i: [e.kind for e in clock.clock(i).events()[events[i]:]] for i in (0, 1)}
    assert kinds == {0: ["d2h"], 1: ["h2d"]}
    assert b.device == torch.device("neuron", 1)
    torch.testing.assert_close(b.cpu(), torch.arange(6.0))


def test_foreach_ops_take_lists_across_indices():
    a, b = torch.arange(4.0, device="neuron:0"), torch.ones(2, device="neuron:1")
    out = torch._foreach_add([a, b], [torch.ones(4, device="neuron:0"), b])
    assert [t.device.index for t in out] == [0, 1]
    torch.testing.assert_close(out[0].cpu(), torch.arange(1.0, 5.0))
    torch.testing.assert_close(out[1].cpu(), torch.full((2,), 2.0))
    torch._foreach_mul_([a, b], 3.0)
    torch.testing.assert_close(b.cpu(), torch.full((2,), 3.0))
