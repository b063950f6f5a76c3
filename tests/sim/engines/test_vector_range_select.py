"""VectorE range_select (sim/engines/vector_range_select.py): the bounds mask and fused max on both
executors, the documented cost formula (S23) and every check."""

import numpy as np
import pytest
from reduce_cases import EXECUTORS, OneOp, cycles, registered_opcodes, rejects

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import AluOp, Opcode, ProgramBuilder
from neuronsim.sim.engines import vector_range_select

FP32_MIN = float(np.finfo(np.float32).min)


def range_select_ref(data, b0, b1, op0, op1, start):
    """S16's numpy equivalent: mask = op0(index, bound0) & op1(index, bound1)."""
    index = (start + np.arange(data.shape[1])).astype(np.float32)[None, :]
    keep = op0(index, b0) & op1(index, b1)
    out = np.where(keep, data, np.float32(FP32_MIN)).astype(np.float32)
    return out, out.max(axis=1, keepdims=True)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("ops", [(AluOp.greater_equal, AluOp.less), (AluOp.greater, AluOp.less_equal),
                                 (AluOp.equal, AluOp.greater_equal)])
def test_range_select_masks_by_free_index_and_reduces(executor, ops):
    """attention_bwd's sequence packing: keep k in [bound_min[q], bound_max[q]) from range_start."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((64, 300)).astype(np.float32)
    b0 = rng.integers(500, 700, (64, 1)).astype(np.float32)
    b1 = b0 + rng.integers(0, 200, (64, 1)).astype(np.float32)
    b1[5] = b0[5]  # an empty range: the row is all FP32_MIN, and so is its max
    k = OneOp()
    srcs = [k.load("data", data), k.load("b0", b0), k.load("b1", b1)]
    out, red = k.result("out", (64, 300)), k.result("red", (64, 1))
    k.emit(Opcode.RANGE_SELECT, out, srcs, dst2=red, cmp0=ops[0], cmp1=ops[1], range_start=512,
           on_false=FP32_MIN)
    got = k.run(executor)
    np_op = {AluOp.greater_equal: np.greater_equal, AluOp.less: np.less, AluOp.greater: np.greater,
             AluOp.less_equal: np.less_equal, AluOp.equal: np.equal}
    want, want_max = range_select_ref(data, b0, b1, np_op[ops[0]], np_op[ops[1]], 512)
    assert np.array_equal(got["out"], want) and np.array_equal(got["red"], want_max)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_bf16_dst_fills_with_minus_inf_while_the_fp32_max_keeps_fp32_min(executor):
    """S16's numerical-stability note: FP32_MIN downcast to bf16 is -inf; reduce_res (fp32) is FP32_MIN."""
    data = np.ones((4, 16), np.float32)
    zeros = np.zeros((4, 1), np.float32)
    k = OneOp()
    srcs = [k.load("data", data), k.load("b0", zeros), k.load("b1", zeros)]
    out, red = k.result("out", (4, 16), "bfloat16"), k.result("red", (4, 1))
    k.emit(Opcode.RANGE_SELECT, out, srcs, dst2=red, cmp0=AluOp.less, cmp1=AluOp.less, on_false=FP32_MIN)
    got = k.run(executor)
    assert np.all(np.isneginf(got["out"].astype(np.float32))) and np.all(got["red"] == np.float32(FP32_MIN))


def test_range_select_cost_and_checks():
    """S23: max(MIN_II, N); fp32 [P, 1] bounds, float data, the five comparisons, FP32_MIN fill."""
    b = ProgramBuilder()
    d, bound = b.sbuf("d", (128, 2048), "float32"), b.sbuf("b", (128, 1), "float32")
    imm = dict(cmp0=AluOp.greater_equal, cmp1=AluOp.less, on_false=FP32_MIN)
    assert cycles(b.emit(Opcode.RANGE_SELECT, d, [d, bound, bound], **imm)) == 2048
    small = b.sbuf("s", (128, 8), "float32")
    assert cycles(b.emit(Opcode.RANGE_SELECT, small, [small, bound, bound], **imm)) == 64

    def emit(k, data_dtype="float32", bound_dtype="float32", red=None, **over):
        data = k.load("d", np.zeros((4, 32), data_dtype))
        b0 = k.load("b0", np.zeros((4, 1), bound_dtype))
        k.emit(Opcode.RANGE_SELECT, k.result("y", (4, 32)), [data, b0, b0], dst2=red and k.result("r", *red),
               **{**imm, **over})
    rejects(lambda k: emit(k, cmp0=AluOp.not_equal), ConstraintError, "cmp0=not_equal is not allowed")
    rejects(lambda k: emit(k, on_false=0.0), ConstraintError, "fills with FP32_MIN")
    rejects(lambda k: emit(k, data_dtype="int32"), DtypeError, "int32; range_select selects float data")
    rejects(lambda k: emit(k, bound_dtype="bfloat16"), DtypeError, "bound0 is bfloat16")
    rejects(lambda k: emit(k, red=((4, 2), "float32")), ConstraintError, "reduce_res is 4x2")
    rejects(lambda k: emit(k, range_start=2**24), ConstraintError, "range_start=16777216")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_range_select) == {Opcode.RANGE_SELECT}
