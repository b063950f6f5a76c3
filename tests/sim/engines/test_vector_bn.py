"""VectorE batch-norm statistics (sim/engines/vector_bn.py): bn_stats and bn_aggr — values on both
executors, the documented cost formulas (S23) and every check."""

import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, OneOp, cycles, registered_opcodes, rejects, run_one

from neuronsim.errors import ConstraintError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import vector_bn

# ---------------------------------------------------------------- bn_stats / bn_aggr

def _two_pass(v):
    """(count, mean, M2) in fp32, folds left to right: the documented bn_stats computation."""
    v = v.astype(np.float32)
    if v.size == 0:
        return [0.0, 0.0, 0.0]
    total = v[0]
    for e in v[1:]:
        total = np.float32(total + e)
    mean = np.float32(total / np.float32(v.size))
    m2 = np.float32(0)
    for e in v:
        d = np.float32(e - mean)
        m2 = np.float32(m2 + np.float32(d * d))
    return [np.float32(v.size), mean, m2]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("n", [1, 7, 512])
def test_bn_stats_layout(executor, n):
    """S16: [count, mean, var*count] of the even elements, then of the odd ones (two-pass fp32)."""
    x = np.random.default_rng(4).standard_normal((16, n)).astype(np.float32) * 3 + 1
    out = run_one(Opcode.BN_STATS, (16, 6), "float32", [x], executor)
    for p in range(16):
        assert np.array_equal(out[p], np.array(_two_pass(x[p, 0::2]) + _two_pass(x[p, 1::2]), np.float32))
    even = x[:, 0::2].astype(np.float64)
    assert np.allclose(out[:, 1], even.mean(1), atol=1e-5)
    assert np.allclose(out[:, 2], even.var(1) * even.shape[1], rtol=1e-4)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_bn_aggr_over_several_bn_stats(executor):
    """bn_stats on each 512-element tile into one stats tensor, then one bn_aggr: the mean and the
    (population) variance of the whole row, S16's recipe for free sizes above 512."""
    x = np.random.default_rng(5).standard_normal((32, 1024)).astype(np.float32) * 2 + 5
    k = OneOp()
    src = k.load("x", x)
    stats = k.b.sbuf("stats", (32, 12), "float32")
    for t in range(2):
        k.emit(Opcode.BN_STATS, stats.ap([[12, 32], [1, 6]], offset=6 * t), [src.ap([[1024, 32], [1, 512]],
                                                                                     offset=512 * t)])
    out = k.result("mv", (32, 2))
    k.emit(Opcode.BN_AGGR, out, [stats])
    mv = k.run(executor)["mv"]
    assert np.allclose(mv[:, 0], x.astype(np.float64).mean(1), rtol=1e-6)
    assert np.allclose(mv[:, 1], x.astype(np.float64).var(1), rtol=1e-4)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_bn_aggr_combination_order(executor):
    """bn_aggr in fp32, tuples in order, count-0 tuples ignored:
    mean = sum(c*m)/n, var = sum(M2 + c*(m - mean)^2)/n; no elements at all gives (0, 0)."""
    stats = np.array([[2, 1.0, 0.5, 3, 4.0, 6.0, 0, np.nan, np.nan],
                      [0, 7.0, 1.0, 0, 1.0, 1.0, 0, 2.0, 2.0]], dtype=np.float32)
    out = run_one(Opcode.BN_AGGR, (2, 2), "float32", [stats], executor)
    f = np.float32
    mean = (f(2) * f(1) + f(3) * f(4)) / f(5)
    d0, d1 = f(1) - mean, f(4) - mean
    acc = ((f(0.5) + f(2) * (d0 * d0)) + f(6)) + f(3) * (d1 * d1)
    assert np.array_equal(out, np.array([[mean, acc / f(5)], [0, 0]], np.float32))


def test_bn_costs():
    """S23: bn_stats max(MIN_II, N); bn_aggr max(MIN_II, 13N/3)."""
    b = ProgramBuilder()
    x, st = b.sbuf("x", (128, 512), "float32"), b.sbuf("st", (128, 48), "float32")
    mv = b.sbuf("mv", (128, 2), "float32")
    assert cycles(b.emit(Opcode.BN_STATS, st.ap([[48, 128], [1, 6]]), [x])) == 512
    assert cycles(b.emit(Opcode.BN_STATS, st.ap([[48, 128], [1, 6]]), [x.ap([[512, 128], [1, 16]])])) == 64
    assert cycles(b.emit(Opcode.BN_AGGR, mv, [st])) == pytest.approx(13 * 48 / 3)
    assert cycles(b.emit(Opcode.BN_AGGR, mv, [st.ap([[48, 128], [1, 6]])])) == 64


def test_bn_checks():
    limit = CHIP.bn_stats_free_max

    def too_long(k):
        k.emit(Opcode.BN_STATS, k.result("s", (4, 6)), [k.load("x", np.zeros((4, limit + 2), np.float32))])
    rejects(too_long, ConstraintError, f"{limit + 2} elements per partition; bn_stats reads at most {limit}")

    def stats_shape(k):
        k.emit(Opcode.BN_STATS, k.result("s", (4, 3)), [k.load("x", np.zeros((4, 8), np.float32))])
    rejects(stats_shape, ConstraintError, "dst is 4x3.*must be 4x6")

    def not_tuples(k):
        k.emit(Opcode.BN_AGGR, k.result("mv", (4, 2)), [k.load("s", np.zeros((4, 7), np.float32))])
    rejects(not_tuples, ConstraintError, "multiple of 3")

    def aggr_shape(k):
        k.emit(Opcode.BN_AGGR, k.result("mv", (4, 1)), [k.load("s", np.zeros((4, 6), np.float32))])
    rejects(aggr_shape, ConstraintError, "dst is 4x1.*must be 4x2")

def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_bn) == {Opcode.BN_STATS, Opcode.BN_AGGR}
