"""VectorE exponential (sim/engines/vector_exp.py): exp(src - max_value) and its running sum on both
executors, against ScalarE's exp, its cost, and every static check (NeuronCore-v4 only)."""

import numpy as np
import pytest
from reduce_cases import EXECUTORS, LOC, OneOp, registered_opcodes

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.engines import OPDEFS, vector_exp
from neuronsim.sim.engines.transcendentals import exp_np

TRN3 = get_chip("trn3")


def _run(k: OneOp, executor):
    out = sim.run(k.build(), k.inputs, TRN3, executor=executor).outputs
    return {t.name: out[t.name + "_out"] for t in k.results}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_exp_of_src_minus_a_per_partition_max_with_its_sum(executor):
    """S16: dst = exp(src - max_value) in fp32 (src - max rounded first, exp rounded once), written as
    dst's dtype; reduce_res sums the fp32 results from reduce_init, left to right."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((64, 50)) * 4).astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    k = OneOp()
    src, mx = k.load("x", x), k.load("m", m)
    y, r = k.result("y", (64, 50), "bfloat16"), k.result("r", (64, 1))
    k.b.emit(Opcode.EXPONENTIAL, y, [src, mx], dst2=r, location=LOC, max_is_tile=True, reduce_init=2.5)
    got = _run(k, executor)
    want = exp_np((x - m).astype(np.float32).astype(np.float64)).astype(np.float32)
    assert np.array_equal(got["y"].astype(np.float32), want.astype(got["y"].dtype).astype(np.float32))
    acc = np.full(64, np.float32(2.5))
    for j in range(50):
        acc = (acc + want[:, j]).astype(np.float32)
    assert np.array_equal(got["r"][:, 0], acc)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_exp_with_an_immediate_max_and_no_sum(executor):
    x = np.array([[0.0, 1.0, -1.0, 100.0, -np.inf, np.nan]], np.float32)
    k = OneOp()
    y = k.result("y", (1, 6))
    k.b.emit(Opcode.EXPONENTIAL, y, [k.load("x", x)], location=LOC, max_value=1.0)
    got = _run(k, executor)["y"][0]
    assert got[0] == np.float32(np.exp(np.float64(-1.0))) and got[1] == 1.0 and got[4] == 0.0
    assert np.isinf(got[3]) and np.isnan(got[5])


def test_exp_cost_and_checks():
    """Assumed: an elementwise VectorE pass; v4 only; max_value tile fp32 [P, 1]; reduce_res [P, 1]."""
    b = ProgramBuilder()
    x, y = b.sbuf("x", (128, 512), "float32"), b.sbuf("y", (128, 512), "float32")
    ins = b.emit(Opcode.EXPONENTIAL, y, [x], max_value=0.0)
    assert OPDEFS[Opcode.EXPONENTIAL].cycles(ins, TRN3) == pytest.approx(512.0)

    def rejects(chip, error, match, **kw):
        b = ProgramBuilder()
        x = b.sbuf("x", (32, 16), "float32")
        srcs = [x] + ([b.sbuf("m", (32, kw.pop("m_free", 1)), kw.pop("m_dtype", "float32"))]
                      if kw.get("max_is_tile") else [])
        reduce, r_dtype = kw.pop("reduce", False), kw.pop("r_dtype", "float32")
        dst2 = b.sbuf("r", (32, 1), r_dtype) if reduce else None
        b.emit(Opcode.EXPONENTIAL, b.sbuf("y", (32, 16), "float32"), srcs, dst2=dst2, location=LOC, **kw)
        with pytest.raises(error, match=match):
            sim.prepare(b.build(), chip)

    rejects("trn2", ConstraintError, "NeuronCore-v4 \\(trn3\\) and newer; this chip is NeuronCore-v3")
    rejects("trn3", DtypeError, "max_value is bfloat16", max_is_tile=True, m_dtype="bfloat16")
    rejects("trn3", ConstraintError, "max_value", max_is_tile=True, m_free=2)
    rejects("trn3", DtypeError, "reduce_res is int32", reduce=True, r_dtype="int32")
    rejects("trn3", ConstraintError, "reduce_init='x' must be a float", reduce_init="x")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_exp) == {Opcode.EXPONENTIAL}
