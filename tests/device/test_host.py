"""The host fallback's short path (device tensors alone or in lists, several fresh results, in-place
ops returning nothing) gives what the general path gives: values, results adopted on the device,
the clock's bytes and signature; and the 64-bit widening answer cached per argument layout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from neuronsim.device import clock, hbm, host
from neuronsim.options import options

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_gpt  # noqa: E402


def _last_fallback(fn):
    device_clock = clock.clock(0)
    before = len(device_clock.events())
    result = fn()
    events = device_clock.events()[before:]
    assert [e.kind for e in events] == ["launch", "to_host", "to_device"]
    return result, events


def _lists(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(shape, generator=g) + 0.5 for shape in ((5, 3), (7,), (2, 2, 2))]


def test_a_foreach_fallback_charges_every_tensor_of_its_lists(no_native_kernels):
    xs, ys = _lists(0), _lists(1)
    dx, dy = [x.to("neuron") for x in xs], [y.to("neuron") for y in ys]
    torch.neuron.clear_op_tracking()
    _, (launch, to_host, to_device) = _last_fallback(lambda: torch._foreach_add_(dx, dy, alpha=0.5))
    torch._foreach_add_(xs, ys, alpha=0.5)
    assert all(torch.equal(d.cpu(), x) for d, x in zip(dx, xs, strict=True))
    assert torch.neuron.get_fallback_ops() == ["aten::_foreach_add_.List"]
    assert to_host.bytes == sum(t.nbytes for t in dx + dy) and to_device.bytes == sum(t.nbytes for t in dx)
    assert launch.signature == tuple((t.dtype, t.shape) for t in dx + dy)


def test_fresh_list_and_tuple_results_are_device_tensors_charged_to_hbm(no_native_kernels):
    xs = _lists(2)
    dx = [x.to("neuron") for x in xs]
    ledger = hbm.ledger(0)
    before = ledger.allocated_bytes
    roots, (_, _, to_device) = _last_fallback(lambda: torch._foreach_sqrt(dx))
    assert all(r.device.type == "neuron" and torch.equal(r.cpu(), x.sqrt())
               for r, x in zip(roots, xs, strict=True))
    assert to_device.bytes == sum(r.nbytes for r in roots)
    assert ledger.allocated_bytes - before >= sum(r.nbytes for r in roots)
    x, w, b = torch.randn(4, 6), torch.randn(6), torch.randn(6)
    got = torch.native_layer_norm(x.to("neuron"), (6,), w.to("neuron"), b.to("neuron"), 1e-5)
    expected = torch.native_layer_norm(x, (6,), w, b, 1e-5)
    assert isinstance(got, tuple) and len(got) == 3
    assert all(g.device.type == "neuron" and torch.equal(g.cpu(), e)
               for g, e in zip(got, expected, strict=True))


def test_a_list_holding_a_cpu_tensor_still_raises_torchs_device_error(no_native_kernels):
    a = [torch.ones(3, device="neuron"), torch.ones(3, device="neuron")]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add_(a, [torch.ones(3, device="neuron"), torch.ones(3)])


def test_fast_numerics_foreach_ops_match_the_cpu_and_run_natively():
    xs, ys, zs = _lists(3), _lists(4), _lists(5)
    dx, dy, dz = ([t.to("neuron") for t in ts] for ts in (xs, ys, zs))
    torch.neuron.clear_op_tracking()
    with options(numerics="fast"):
        torch._foreach_addcdiv_(dx, dy, dz, [0.1, -0.2, 0.3])
        droots = torch._foreach_sqrt(dx)
    torch._foreach_addcdiv_(xs, ys, zs, [0.1, -0.2, 0.3])
    roots = torch._foreach_sqrt(xs)
    assert all(torch.equal(d.cpu(), x) for d, x in zip(dx, xs, strict=True))
    assert all(torch.equal(d.cpu(), r) for d, r in zip(droots, roots, strict=True))
    assert torch.neuron.get_fallback_ops() == []
    executed = set(torch.neuron.get_executed_ops())
    assert {"aten::_foreach_addcdiv_.ScalarList", "aten::_foreach_sqrt"} <= executed


def test_the_widening_answer_is_cached_per_layout_not_per_op(no_native_kernels):
    """float64 computes in float32 on the device; a 0-dim float64 leaves a float32 result float32,
    a 1-dim one makes it float64 (ATen's promotion): the cache must tell the two calls apart."""
    host._widen_cache.clear()
    f32 = torch.ones(3, device="neuron")
    scalar64 = torch.tensor(2.0, dtype=torch.float64, device="neuron")
    vector64 = torch.full((3,), 2.0, dtype=torch.float64, device="neuron")
    for _ in range(2):
        assert (f32 * scalar64).dtype == torch.float32
        assert (f32 * vector64).dtype == torch.float64
        i64 = torch.arange(4, device="neuron")
        assert (i64 * 3).dtype == torch.int64 and (i64 * 3).cpu().tolist() == [0, 3, 6, 9]
    # One entry per layout (the second round hit them), each with its own answer.
    answers = [frozenset(found) for key, found in host._widen_cache.items() if key[0] == "aten::mul.Tensor"]
    expected = [frozenset(), frozenset({torch.float32}), frozenset({torch.int32})]
    assert sorted(answers, key=str) == sorted(expected, key=str)


def test_fast_numerics_train_gpt_gives_the_cpus_losses_bit_for_bit():
    """fast: ATen-CPU computes every value (on the host short path's specialised calls), so the
    losses are the CPU's exactly, while the device time still comes from the native Programs."""
    args = ["--steps", "3", "--batch", "4", "--block", "16", "--quiet"]
    cpu = train_gpt.main([*args, "--device", "cpu"])
    torch.neuron.clear_op_tracking()
    start = clock.clock(0).now_ns
    with options(numerics="fast"):
        neuron = train_gpt.main([*args, "--device", "neuron"])
    assert neuron == cpu
    assert not torch.neuron.get_fallback_ops()
    assert clock.clock(0).now_ns > start


def test_the_widening_cache_keys_on_the_default_dtype(no_native_kernels):
    """``int64 * 2.5`` takes the default float dtype: float64 under a float64 default (its float32
    host result widens back), float32 under float32 (nothing widens), in either order."""
    host._widen_cache.clear()
    i64 = torch.arange(4, device="neuron")
    try:
        for default in (torch.float64, torch.float32):
            torch.set_default_dtype(default)
            got = i64 * 2.5
            assert got.dtype == default
            assert got.cpu().tolist() == [0.0, 2.5, 5.0, 7.5]
    finally:
        torch.set_default_dtype(torch.float32)


def test_fast_numerics_take_scalars_keywords_and_index_tensors_as_the_cpu_does():
    """The specialised host call keeps each argument kind: a 0-dim CPU scalar, a Python number in a
    ``Tensor`` slot, keyword scalars, an in-place op's ``self``, int64 indices (kept whole)."""
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    index = torch.tensor([4, 0, 2, 2])
    aten = torch.ops.aten
    cases = {
        "cpu scalar": lambda a, b, i: a * torch.tensor(1.5),
        "number in a Tensor slot": lambda a, b, i: aten.mul.Tensor(a, 3),
        "keyword alpha": lambda a, b, i: torch.add(a, b, alpha=-0.25),
        "in place": lambda a, b, i: a.clone().mul_(b),
        "int64 index": lambda a, b, i: a.index_select(0, i),
        "two results": lambda a, b, i: torch.max(a, dim=1),
        "dtype argument": lambda a, b, i: aten._softmax_backward_data(b, a.softmax(1), 1, torch.float32),
        "all tensors": lambda a, b, i: aten.mm(a, b.t().contiguous()),
    }
    for name, fn in cases.items():
        expected = fn(x, y, index)
        for _ in range(2):  # the first call builds the entry's host call, the second uses it
            with options(numerics="fast"):
                got = fn(x.to("neuron"), y.to("neuron"), index.to("neuron"))
            for g_, e in zip(got if isinstance(got, tuple) else (got,),
                             expected if isinstance(expected, tuple) else (expected,), strict=True):
                assert g_.device.type == "neuron" and g_.dtype == e.dtype, name
                assert torch.equal(g_.cpu(), e), name
