"""Shared by the tests of VectorE's folds and statistics (test_vector_reduce.py, test_vector_bn.py,
test_vector_top_k.py): a one-instruction Program, its documented cycles, a rejected Program, and a
left-to-right fp32 fold to compare with."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import dtype_of
from neuronsim.sim.engines import OPDEFS

EXECUTORS = ["numba", "reference"]
LOC = "kernel.py:7"
CHIP = get_chip("trn2")


class OneOp:
    """A Program around one instruction: DMA the inputs into SBUF, run it, DMA the results out."""

    def __init__(self):
        self.b = ProgramBuilder("one_op")
        self.inputs: dict[str, np.ndarray] = {}
        self.results = []

    def load(self, name, array, dtype=None):
        dtype = dtype_of(array.dtype) if dtype is None else dtype_of(dtype)
        h = self.b.hbm(name + "_in", array.shape, dtype)
        t = self.b.sbuf(name, array.shape, dtype)
        self.b.emit(Opcode.DMA_COPY, t, [h])
        self.inputs[h.name] = array
        return t

    def result(self, name, shape, dtype="float32"):
        t = self.b.sbuf(name, shape, dtype)
        self.results.append(t)
        return t

    def emit(self, opcode, dst, srcs=(), **imm):
        return self.b.emit(opcode, dst, srcs, location=LOC, **imm)

    def build(self):
        for t in self.results:
            self.b.emit(Opcode.DMA_COPY, self.b.hbm(t.name + "_out", t.shape, t.dtype, kind="output"), [t])
        return self.b.build()

    def run(self, executor):
        out = sim.run(self.build(), self.inputs, executor=executor).outputs
        return {t.name: out[t.name + "_out"] for t in self.results}


def run_one(ins_opcode, dst_shape, dst_dtype, srcs, executor, **imm):
    k = OneOp()
    loaded = [k.load(f"in{i}", a) for i, a in enumerate(srcs)]
    out = k.result("out", dst_shape, dst_dtype)
    k.emit(ins_opcode, out, loaded, **imm)
    return k.run(executor)["out"]


def cycles(ins):
    return OPDEFS[ins.opcode].cycles(ins, CHIP)


def rejects(build, cls, match):
    k = OneOp()
    build(k)
    with pytest.raises(cls, match=match) as err:
        sim.prepare(k.build(), CHIP)
    assert LOC in str(err.value)


def fold(op, x, axis_len):
    """Left-to-right fp32 fold over the last axis, one rounding per step."""
    x = x.reshape(*x.shape[:-1], -1, axis_len) if axis_len else x
    acc = x[..., 0].astype(np.float32)
    for j in range(1, x.shape[-1]):
        acc = op(acc, x[..., j]).astype(np.float32)
    return acc


def registered_opcodes(module) -> set:
    """The opcodes ``module`` defines, after checking each is the one the executors use."""
    assert all(OPDEFS[d.opcode] is d for d in module.OPS)
    return {d.opcode for d in module.OPS}
