"""VectorE reductions and statistics (sim/engines/vector_reduce.py): tensor_reduce,
tensor_tensor_scan, bn_stats, bn_aggr, max8, nc_find_index8 — values on both executors, the
documented cost formulas (S23) and every check."""

import ml_dtypes
import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import AluOp, Opcode, ProgramBuilder
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


def _one(ins_opcode, dst_shape, dst_dtype, srcs, executor, **imm):
    k = OneOp()
    loaded = [k.load(f"in{i}", a) for i, a in enumerate(srcs)]
    out = k.result("out", dst_shape, dst_dtype)
    k.emit(ins_opcode, out, loaded, **imm)
    return k.run(executor)["out"]


def _cycles(ins):
    return OPDEFS[ins.opcode].cycles(ins, CHIP)


def _rejects(build, cls, match):
    k = OneOp()
    build(k)
    with pytest.raises(cls, match=match) as err:
        sim.prepare(k.build(), CHIP)
    assert LOC in str(err.value)


def _fold(op, x, axis_len):
    """Left-to-right fp32 fold over the last axis, one rounding per step."""
    x = x.reshape(*x.shape[:-1], -1, axis_len) if axis_len else x
    acc = x[..., 0].astype(np.float32)
    for j in range(1, x.shape[-1]):
        acc = op(acc, x[..., j]).astype(np.float32)
    return acc


# ---------------------------------------------------------------- tensor_reduce

@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_trailing_axes(executor):
    """tensor_reduce folds the trailing num_axes free dims of the AP, left to right in fp32."""
    x = np.random.default_rng(0).standard_normal((8, 60)).astype(np.float32)
    k = OneOp()
    src = k.load("x", x)
    one = k.result("one", (8, 12))
    two = k.result("two", (8, 4))
    k.emit(Opcode.TENSOR_REDUCE, one, [src.ap([[60, 8], [15, 4], [5, 3], [1, 5]])], op=AluOp.add, num_axes=1)
    k.emit(Opcode.TENSOR_REDUCE, two, [src.ap([[60, 8], [15, 4], [5, 3], [1, 5]])], op=AluOp.add, num_axes=2)
    out = k.run(executor)
    assert np.array_equal(out["one"], _fold(np.add, x, 5).reshape(8, 12))
    assert np.array_equal(out["two"], _fold(np.add, x, 15).reshape(8, 4))
    assert np.allclose(out["two"], x.reshape(8, 4, 15).sum(-1), atol=1e-5)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_sums_left_to_right(executor):
    """The fixed order is observable: 1e8 + 1 rounds back to 1e8 in fp32, so the sum is 1, not 2."""
    x = np.array([[1e8, 1.0, -1e8, 1.0]], dtype=np.float32)
    assert _one(Opcode.TENSOR_REDUCE, (1, 1), "float32", [x], executor, op=AluOp.add, num_axes=1)[0, 0] == 1.0


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("op, ref", [
    (AluOp.maximum, np.max), (AluOp.minimum, np.min), (AluOp.multiply, np.prod),
    (AluOp.abs_max, lambda x, axis: np.abs(x).max(axis)),
    (AluOp.abs_min, lambda x, axis: np.abs(x).min(axis)),
    (AluOp.logical_and, lambda x, axis: np.all(x != 0, axis)),
    (AluOp.logical_or, lambda x, axis: np.any(x != 0, axis)),
])
def test_tensor_reduce_ops(executor, op, ref):
    x = np.random.default_rng(1).integers(-3, 4, size=(16, 6)).astype(np.float32)
    x[3] = 0.0
    out = _one(Opcode.TENSOR_REDUCE, (16, 1), "float32", [x], executor, op=op, num_axes=1)
    assert np.array_equal(out[:, 0], ref(x, axis=1).astype(np.float32))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_negate_and_one_element(executor):
    """negate multiplies by -1; a one-element fold is op(identity, x): |x| for abs_max, -0.0 stays -0.0."""
    x = np.array([[-2.0], [-0.0]], dtype=np.float32)
    neg = _one(Opcode.TENSOR_REDUCE, (2, 1), "float32", [x], executor, op=AluOp.abs_max, num_axes=1,
               negate=True)
    assert np.array_equal(neg[:, 0], [-2.0, -0.0])
    total = _one(Opcode.TENSOR_REDUCE, (2, 1), "float32", [x], executor, op=AluOp.add, num_axes=1)
    assert np.signbit(total[1, 0]) and total[0, 0] == -2.0


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("op, ufunc", [(AluOp.bitwise_and, np.bitwise_and), (AluOp.bitwise_or, np.bitwise_or),
                                       (AluOp.bitwise_xor, np.bitwise_xor)])
def test_tensor_reduce_bitvec_on_integers(executor, op, ufunc):
    """Bit operators fold the integer bit patterns (no fp32 cast): exact on full-range int32."""
    x = np.random.default_rng(2).integers(-2**31, 2**31, size=(4, 9), dtype=np.int32)
    out = _one(Opcode.TENSOR_REDUCE, (4, 1), "int32", [x], executor, op=op, num_axes=1)
    assert np.array_equal(out[:, 0], ufunc.reduce(x, axis=1))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_rounds_once_to_dst(executor):
    x = (np.arange(64, dtype=np.float32) * 1.001).reshape(1, 64)
    out = _one(Opcode.TENSOR_REDUCE, (1, 1), "bfloat16", [x], executor, op=AluOp.add, num_axes=1)
    assert out[0, 0] == _fold(np.add, x, 0).astype(ml_dtypes.bfloat16)[0]


def test_tensor_reduce_cost():
    """S23: N/2 if bf16 in and out with add/max, else N."""
    b = ProgramBuilder()
    x16, y16 = b.sbuf("x16", (128, 512), "bfloat16"), b.sbuf("y16", (128, 1), "bfloat16")
    x32, y32 = b.sbuf("x32", (128, 512), "float32"), b.sbuf("y32", (128, 1), "float32")
    assert _cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.add, num_axes=1)) == 256
    assert _cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.maximum, num_axes=1)) == 256
    assert _cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.minimum, num_axes=1)) == 512
    assert _cycles(b.emit(Opcode.TENSOR_REDUCE, y32, [x16], op=AluOp.add, num_axes=1)) == 512
    assert _cycles(b.emit(Opcode.TENSOR_REDUCE, y32, [x32], op=AluOp.add, num_axes=1)) == 512
    tl = sim.prepare(b.build(), CHIP).timeline
    assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(256 / 0.96)  # VectorE at 0.96 GHz


def _reduce_case(k, dst_shape=(4, 1), dst_dtype="float32", src_dtype="float32", num_axes=1, **imm):
    x = k.load("x", np.zeros((4, 8), dtype=dtype_of(src_dtype).numpy))
    k.emit(Opcode.TENSOR_REDUCE, k.result("y", dst_shape, dst_dtype), [x], num_axes=num_axes,
           **({"op": AluOp.add} | imm))


@pytest.mark.parametrize("kw, cls, match", [
    ({"num_axes": 2}, ConstraintError, "num_axes=2.*1 to 1 trailing free dims"),
    ({"num_axes": 0}, ConstraintError, "num_axes=0"),
    ({"dst_shape": (4, 2)}, ConstraintError, "dst is 4x2.*must be 4x1"),
    ({"op": AluOp.subtract}, ConstraintError, "op=subtract is not allowed"),
    ({"op": AluOp.bitwise_or}, DtypeError, "float32 is not an integer dtype"),
    ({"op": AluOp.bitwise_or, "src_dtype": "int32", "dst_dtype": "int32", "negate": True}, ConstraintError,
     "negate applies to arithmetic"),
])
def test_tensor_reduce_checks(kw, cls, match):
    _rejects(lambda k: _reduce_case(k, **kw), cls, match)


def test_tensor_reduce_free_size_limit_from_psum():
    """S9: VectorE reads at most vector_free_max_psum elements per partition from PSUM."""
    b = ProgramBuilder()
    p = b.psum("p", (2, CHIP.vector_free_max_psum + 8), "bfloat16")
    y = b.sbuf("y", (2, 1), "float32")
    b.emit(Opcode.TENSOR_REDUCE, y, [p], op=AluOp.add, num_axes=1, location=LOC)
    with pytest.raises(ConstraintError, match=f"at most {CHIP.vector_free_max_psum} per partition from PSUM"):
        sim.prepare(b.build(), CHIP)


# ---------------------------------------------------------------- tensor_tensor_scan

@pytest.mark.parametrize("executor", EXECUTORS)
def test_scan_linear_recurrence(executor):
    """result[i] = op1(op0(data0[i], result[i-1]), data1[i]); with multiply/add: h = a*h + b."""
    rng = np.random.default_rng(3)
    a, bb = rng.uniform(0.5, 1.0, (8, 20)).astype(np.float32), rng.standard_normal((8, 20)).astype(np.float32)
    h0 = rng.standard_normal((8, 1)).astype(np.float32)
    k = OneOp()
    srcs = [k.load("a", a), k.load("b", bb), k.load("h0", h0)]
    out = k.result("h", (8, 20))
    k.emit(Opcode.TENSOR_TENSOR_SCAN, out, srcs, op0=AluOp.multiply, op1=AluOp.add, initial_is_tile=True)
    got = k.run(executor)["h"]
    h = h0[:, 0].copy()
    for i in range(20):
        h = (a[:, i] * h).astype(np.float32) + bb[:, i]
        assert np.array_equal(got[:, i], h)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_scan_cumulative_sum_and_reverse(executor):
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 6)
    zeros = np.zeros_like(x)
    cumsum = _one(Opcode.TENSOR_TENSOR_SCAN, (1, 6), "float32", [x, zeros], executor,
                  op0=AluOp.add, op1=AluOp.add, initial=10.0)
    assert np.array_equal(cumsum[0], 10 + np.cumsum(x[0]))
    # reverse0: op0(state, data0) = state - x; reverse1: op1(data1, tmp) = 0 - tmp  ->  s_i = x_i - s_{i-1}
    alt = _one(Opcode.TENSOR_TENSOR_SCAN, (1, 6), "float32", [x, zeros], executor,
               op0=AluOp.subtract, op1=AluOp.subtract, reverse0=True, reverse1=True)
    s, want = 0.0, []
    for v in x[0]:
        s = v - s
        want.append(s)
    assert np.array_equal(alt[0], want)


def test_scan_cost():
    """S23: max(MIN_II, 2N)."""
    b = ProgramBuilder()
    small, big = b.sbuf("s", (128, 16), "float32"), b.sbuf("b", (128, 100), "bfloat16")
    ops = {"op0": AluOp.add, "op1": AluOp.add}
    assert _cycles(b.emit(Opcode.TENSOR_TENSOR_SCAN, small, [small, small], **ops)) == 64
    assert _cycles(b.emit(Opcode.TENSOR_TENSOR_SCAN, big, [big, big], **ops)) == 200


def test_scan_checks():
    def both_psum(k):
        b = k.b
        p1, p2 = b.psum("p1", (4, 8)), b.psum("p2", (4, 8))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [p1, p2], op0=AluOp.add, op1=AluOp.add)
    _rejects(both_psum, ConstraintError, "cannot both be in PSUM")

    def shapes(k):
        x, y = k.load("x", np.zeros((4, 8), np.float32)), k.load("z", np.zeros((4, 6), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, y], op0=AluOp.add, op1=AluOp.add)
    _rejects(shapes, ConstraintError, "data0 is 4x8.*data1 is 4x6")

    def tile(k):
        x, t = k.load("x", np.zeros((4, 8), np.float32)), k.load("t", np.zeros((4, 2), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, x, t], op0=AluOp.add, op1=AluOp.add,
               initial_is_tile=True)
    _rejects(tile, ConstraintError, "initial tile is 4x2.*must be 4x1")

    def missing_tile(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, x], op0=AluOp.add, op1=AluOp.add,
               initial_is_tile=True)
    _rejects(missing_tile, ConstraintError, "takes 3 source operand")

    def bitvec(k):
        x = k.load("x", np.zeros((4, 8), np.int32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8), "int32"), [x, x], op0=AluOp.bitwise_and,
               op1=AluOp.add)
    _rejects(bitvec, ConstraintError, "op0=bitwise_and is not allowed")


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
    out = _one(Opcode.BN_STATS, (16, 6), "float32", [x], executor)
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
    out = _one(Opcode.BN_AGGR, (2, 2), "float32", [stats], executor)
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
    assert _cycles(b.emit(Opcode.BN_STATS, st.ap([[48, 128], [1, 6]]), [x])) == 512
    assert _cycles(b.emit(Opcode.BN_STATS, st.ap([[48, 128], [1, 6]]), [x.ap([[512, 128], [1, 16]])])) == 64
    assert _cycles(b.emit(Opcode.BN_AGGR, mv, [st])) == pytest.approx(13 * 48 / 3)
    assert _cycles(b.emit(Opcode.BN_AGGR, mv, [st.ap([[48, 128], [1, 6]])])) == 64


def test_bn_checks():
    limit = CHIP.bn_stats_free_max

    def too_long(k):
        k.emit(Opcode.BN_STATS, k.result("s", (4, 6)), [k.load("x", np.zeros((4, limit + 2), np.float32))])
    _rejects(too_long, ConstraintError, f"{limit + 2} elements per partition; bn_stats reads at most {limit}")

    def stats_shape(k):
        k.emit(Opcode.BN_STATS, k.result("s", (4, 3)), [k.load("x", np.zeros((4, 8), np.float32))])
    _rejects(stats_shape, ConstraintError, "dst is 4x3.*must be 4x6")

    def not_tuples(k):
        k.emit(Opcode.BN_AGGR, k.result("mv", (4, 2)), [k.load("s", np.zeros((4, 7), np.float32))])
    _rejects(not_tuples, ConstraintError, "multiple of 3")

    def aggr_shape(k):
        k.emit(Opcode.BN_AGGR, k.result("mv", (4, 1)), [k.load("s", np.zeros((4, 6), np.float32))])
    _rejects(aggr_shape, ConstraintError, "dst is 4x1.*must be 4x2")


# ---------------------------------------------------------------- max8 / nc_find_index8

@pytest.mark.parametrize("executor", EXECUTORS)
def test_max8_descending_with_ties_and_nan(executor):
    """S16: the 8 largest per partition, descending. Assumed: NaN ranks first; ties keep input
    order (so -0.0 read before 0.0 comes out first)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((32, 40)).astype(np.float32)
    x[1, :12] = 5.0  # duplicates fill the top 8
    x[2, 3], x[2, 30] = np.nan, np.inf
    x[3] = -1.0
    x[3, 5], x[3, 9] = -0.0, 0.0
    out = _one(Opcode.MAX8, (32, 8), "float32", [x], executor)
    plain = [p for p in range(32) if p not in (2,)]
    assert np.array_equal(out[plain], -np.sort(-x[plain], axis=1)[:, :8])
    assert np.isnan(out[2, 0]) and out[2, 1] == np.inf
    assert np.signbit(out[3, 0]) and not np.signbit(out[3, 1])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_max8_then_find_index8(executor):
    """nc_find_index8: the first index of each value (S16); absent values give the dtype's max."""
    x = np.random.default_rng(7).permutation(64).astype(np.float32).reshape(2, 32)
    x[0, 20] = x[0, 2] = 100.0  # duplicate maximum: first occurrence wins
    k = OneOp()
    src = k.load("x", x)
    top = k.result("top", (2, 8))
    idx32 = k.result("idx32", (2, 8), "uint32")
    missing = k.load("missing", np.full((2, 8), -5.0, np.float32))
    idx16 = k.result("idx16", (2, 8), "uint16")
    k.emit(Opcode.MAX8, top, [src])
    k.emit(Opcode.NC_FIND_INDEX8, idx32, [src, top])
    k.emit(Opcode.NC_FIND_INDEX8, idx16, [src, missing])
    out = k.run(executor)
    for p in range(2):
        want = [int(np.flatnonzero(x[p] == v)[0]) for v in out["top"][p]]
        assert list(out["idx32"][p]) == want
    assert list(out["idx32"][0][:2]) == [2, 2]
    assert np.all(out["idx16"] == 65535)


def test_top_k_costs_and_checks():
    """S23: max8 and nc_find_index8 cost N; they read 8 to 16,384 elements per partition."""
    b = ProgramBuilder()
    x, v = b.sbuf("x", (128, 1000), "float32"), b.sbuf("v", (128, 8), "float32")
    i = b.sbuf("i", (128, 8), "uint32")
    assert _cycles(b.emit(Opcode.MAX8, v, [x])) == 1000
    assert _cycles(b.emit(Opcode.NC_FIND_INDEX8, i, [x, v])) == 1000

    def short(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 8)), [k.load("x", np.zeros((4, 7), np.float32))])
    _rejects(short, ConstraintError, "7 elements per partition; max8 reads 8 to 16384")

    def wide_dst(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 16)), [k.load("x", np.zeros((4, 32), np.float32))])
    _rejects(wide_dst, ConstraintError, "dst is 4x16.*must be 4x8")

    def float_index(k):
        x = k.load("x", np.zeros((4, 32), np.float32))
        k.emit(Opcode.NC_FIND_INDEX8, k.result("i", (4, 8)), [x, k.load("v", np.zeros((4, 8), np.float32))])
    _rejects(float_index, DtypeError, "dst dtype float32 is not allowed.*uint16.*uint32")

    def vals_shape(k):
        x = k.load("x", np.zeros((4, 32), np.float32))
        v = k.load("v", np.zeros((4, 4), np.float32))
        k.emit(Opcode.NC_FIND_INDEX8, k.result("i", (4, 8), "uint32"), [x, v])
    _rejects(vals_shape, ConstraintError, "vals is 4x4.*must be 4x8")


def test_every_opcode_of_this_file_is_registered():
    from neuronsim.sim.engines import vector_reduce

    mine = {d.opcode for d in vector_reduce.OPS}
    assert mine == {Opcode.TENSOR_REDUCE, Opcode.TENSOR_TENSOR_SCAN, Opcode.BN_STATS, Opcode.BN_AGGR,
                    Opcode.MAX8, Opcode.NC_FIND_INDEX8}
    assert all(OPDEFS[op] is d for d in vector_reduce.OPS for op in [d.opcode])


def test_unknown_immediates_are_rejected():
    """A misspelt immediate (num_axis) would otherwise be ignored silently."""
    def misspelt(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_REDUCE, k.result("y", (4, 1)), [x], op=AluOp.add, num_axes=1, num_axis=1)
    _rejects(misspelt, ConstraintError, r"unknown immediates \['num_axis'\]")

    def stray(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 8)), [k.load("x", np.zeros((4, 32), np.float32))], k=8)
    _rejects(stray, ConstraintError, r"unknown immediates \['k'\]")
