"""Measured blocks (in this process): device ops and NKI launches inside the block and nothing
else, op rows by name (fallbacks and host copies marked), nesting, snapshots, a launch measured in
a block the same as from its profile."""

import numpy as np
import pytest
import torch

import neuronsim
import neuronsim.nki as nki
import neuronsim.nki.language as nl
from neuronsim.device import clock
from neuronsim.testing import from_profile, measure

neuronsim.enable()


@nki.jit
def copy(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


A = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)


def test_a_block_measures_its_own_device_ops():
    x = torch.randn(32, 32).to("neuron")
    torch.relu(x)  # before the block: not measured
    start = clock.clock(0).now_ns
    with measure() as block:
        y = x @ x
        torch.cumsum(y, 0)  # no native kernel: a host fallback
        y.cpu()
    assert block.total_time == pytest.approx((clock.clock(0).now_ns - start) * 1e-9, rel=1e-12)
    assert set(block.op_seconds) == {"aten::mm", "aten::cumsum (fallback)", "aten::_copy_from (transfer)"}
    assert block.fallback_ops == {"aten::cumsum": 1} and block.executed_ops == {"aten::mm": 1}
    assert block.summary["host_fallback_count"] == 1 and block.kernels == ()
    assert sum(block.op_seconds.values()) == pytest.approx(block.total_time, rel=1e-9)


def test_blocks_nest_and_read_so_far_inside():
    x = torch.randn(16, 16).to("neuron")
    with measure() as outer:
        torch.relu(x)
        inside = outer.total_time  # a snapshot: what ran so far
        with measure() as inner:
            torch.tanh(x)
    assert set(inner.op_seconds) == {"aten::tanh"}
    assert set(outer.op_seconds) == {"aten::relu", "aten::tanh"}
    assert outer.total_time == pytest.approx(inside + inner.total_time, rel=1e-12)


def test_a_launch_in_a_block_measures_as_its_profile():
    _, profile = nki.simulate(copy, profile=True)(A)
    with measure() as block:
        nki.simulate(copy)(A)
    direct = from_profile(profile)
    assert block.kernels == direct.kernels == ("copy",)
    assert block.total_time == direct.total_time == profile.summary["total_time"]
    assert block.op_seconds.keys() == direct.op_seconds.keys() == {"copy: dma_copy (dma)"}
    row = "copy: dma_copy (dma)"
    assert block.op_seconds[row] == pytest.approx(direct.op_seconds[row])
    assert block.figures() == direct.figures()


def test_the_clock_keeps_its_usual_ring_after_a_block():
    with measure():
        pass
    records = clock.clock(0)._records
    assert records.maxlen == clock.DEFAULT_CAPACITY
