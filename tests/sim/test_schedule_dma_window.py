"""DMA engines are taken for the earliest free window: a transfer still waiting for its data does
not hold the engines against a later transfer on another queue (``sim/schedule.py``)."""

import pytest

from neuronsim import sim
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.ir import AluOp, Engine


def _program():
    b = ProgramBuilder("dma_window")
    a = b.hbm("a", (128, 2048), "float32")
    c = b.hbm("c", (128, 2048), "float32")
    out = b.hbm("out", (128, 2048), "float32", kind="output")
    x = b.sbuf("x", (128, 2048), "float32", address=(0, 0))
    y = b.sbuf("y", (128, 2048), "float32", address=(0, 8192))
    z = b.sbuf("z", (128, 2048), "float32", address=(0, 16384))
    b.emit(Opcode.DMA_COPY, x, [a], queue=0)  # 0: load
    b.emit(Opcode.TENSOR_TENSOR, y, [x, x], engine=Engine.VECTOR, op=AluOp.add)  # 1: long compute
    b.emit(Opcode.DMA_COPY, out, [y], queue=1)  # 2: store, waits for 1
    b.emit(Opcode.DMA_COPY, z, [c], queue=2)  # 3: independent load, issued after the store
    return b.build()


def test_independent_transfer_runs_while_an_earlier_one_waits_for_its_data():
    tl = sim.prepare(_program(), "trn2").timeline
    assert tl.issue_ns[2] == pytest.approx(tl.done_ns[1])  # the store is triggered when the add is done
    assert tl.issue_ns[3] == 0.0  # the later load does not wait behind it
    assert tl.start_ns[3] < tl.end_ns[0] + 1.0  # it follows the first load on the engines
    assert tl.end_ns[3] <= tl.start_ns[2]
