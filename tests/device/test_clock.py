"""The device clock hands its records to the profiler through the reader it registered."""

from __future__ import annotations

import torch

from neuronsim.device import clock
from neuronsim.profiler import session


def test_a_profiling_session_reads_the_device_ops_and_the_clocks_keep_more_while_it_records():
    x = torch.ones(4, 8)
    rec = session.start()
    try:
        assert clock.clock(0)._records.maxlen >= session.DEVICE_CLOCK_CAPACITY
        y = (x.to("neuron") * 3).cpu()
    finally:
        session.stop()
    assert torch.equal(y, x * 3)
    ops = [e for e in session.device_events()[0]
           if e.wall_ns is not None and e.wall_ns >= rec.started_wall_ns]
    assert [e.kind for e in ops] == ["transfer", "kernel", "transfer"]
    assert ops[1].name.startswith("aten::mul") and ops[1].kernel is not None
    session.release_clocks()
    assert clock.clock(0)._records.maxlen == clock.DEFAULT_CAPACITY
