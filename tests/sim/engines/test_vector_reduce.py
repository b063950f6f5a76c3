"""VectorE folds (sim/engines/vector_reduce.py): tensor_reduce and tensor_tensor_scan — values on
both executors, the documented cost formulas (S23) and every check."""

import ml_dtypes
import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, LOC, OneOp, cycles, fold, registered_opcodes, rejects, run_one

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import AluOp, Opcode, ProgramBuilder
from neuronsim.sim.dtypes import dtype_of
from neuronsim.sim.engines import vector_reduce

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
    assert np.array_equal(out["one"], fold(np.add, x, 5).reshape(8, 12))
    assert np.array_equal(out["two"], fold(np.add, x, 15).reshape(8, 4))
    assert np.allclose(out["two"], x.reshape(8, 4, 15).sum(-1), atol=1e-5)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_sums_left_to_right(executor):
    """The fixed order is observable: 1e8 + 1 rounds back to 1e8 in fp32, so the sum is 1, not 2."""
    x = np.array([[1e8, 1.0, -1e8, 1.0]], dtype=np.float32)
    total = run_one(Opcode.TENSOR_REDUCE, (1, 1), "float32", [x], executor, op=AluOp.add, num_axes=1)
    assert total[0, 0] == 1.0


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
    out = run_one(Opcode.TENSOR_REDUCE, (16, 1), "float32", [x], executor, op=op, num_axes=1)
    assert np.array_equal(out[:, 0], ref(x, axis=1).astype(np.float32))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_negate_and_one_element(executor):
    """negate multiplies by -1; a one-element fold is op(identity, x): |x| for abs_max, -0.0 stays -0.0."""
    x = np.array([[-2.0], [-0.0]], dtype=np.float32)
    neg = run_one(Opcode.TENSOR_REDUCE, (2, 1), "float32", [x], executor, op=AluOp.abs_max, num_axes=1,
               negate=True)
    assert np.array_equal(neg[:, 0], [-2.0, -0.0])
    total = run_one(Opcode.TENSOR_REDUCE, (2, 1), "float32", [x], executor, op=AluOp.add, num_axes=1)
    assert np.signbit(total[1, 0]) and total[0, 0] == -2.0


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("op, ufunc", [(AluOp.bitwise_and, np.bitwise_and), (AluOp.bitwise_or, np.bitwise_or),
                                       (AluOp.bitwise_xor, np.bitwise_xor)])
def test_tensor_reduce_bitvec_on_integers(executor, op, ufunc):
    """Bit operators fold the integer bit patterns (no fp32 cast): exact on full-range int32."""
    x = np.random.default_rng(2).integers(-2**31, 2**31, size=(4, 9), dtype=np.int32)
    out = run_one(Opcode.TENSOR_REDUCE, (4, 1), "int32", [x], executor, op=op, num_axes=1)
    assert np.array_equal(out[:, 0], ufunc.reduce(x, axis=1))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tensor_reduce_rounds_once_to_dst(executor):
    x = (np.arange(64, dtype=np.float32) * 1.001).reshape(1, 64)
    out = run_one(Opcode.TENSOR_REDUCE, (1, 1), "bfloat16", [x], executor, op=AluOp.add, num_axes=1)
    assert out[0, 0] == fold(np.add, x, 0).astype(ml_dtypes.bfloat16)[0]


def test_tensor_reduce_cost():
    """S23: N/2 if bf16 in and out with add/max, else N."""
    b = ProgramBuilder()
    x16, y16 = b.sbuf("x16", (128, 512), "bfloat16"), b.sbuf("y16", (128, 1), "bfloat16")
    x32, y32 = b.sbuf("x32", (128, 512), "float32"), b.sbuf("y32", (128, 1), "float32")
    assert cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.add, num_axes=1)) == 256
    assert cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.maximum, num_axes=1)) == 256
    assert cycles(b.emit(Opcode.TENSOR_REDUCE, y16, [x16], op=AluOp.minimum, num_axes=1)) == 512
    assert cycles(b.emit(Opcode.TENSOR_REDUCE, y32, [x16], op=AluOp.add, num_axes=1)) == 512
    assert cycles(b.emit(Opcode.TENSOR_REDUCE, y32, [x32], op=AluOp.add, num_axes=1)) == 512
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
    rejects(lambda k: _reduce_case(k, **kw), cls, match)


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
    cumsum = run_one(Opcode.TENSOR_TENSOR_SCAN, (1, 6), "float32", [x, zeros], executor,
                  op0=AluOp.add, op1=AluOp.add, initial=10.0)
    assert np.array_equal(cumsum[0], 10 + np.cumsum(x[0]))
    # reverse0: op0(state, data0) = state - x; reverse1: op1(data1, tmp) = 0 - tmp  ->  s_i = x_i - s_{i-1}
    alt = run_one(Opcode.TENSOR_TENSOR_SCAN, (1, 6), "float32", [x, zeros], executor,
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
    assert cycles(b.emit(Opcode.TENSOR_TENSOR_SCAN, small, [small, small], **ops)) == 64
    assert cycles(b.emit(Opcode.TENSOR_TENSOR_SCAN, big, [big, big], **ops)) == 200


def test_scan_checks():
    def both_psum(k):
        b = k.b
        p1, p2 = b.psum("p1", (4, 8)), b.psum("p2", (4, 8))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [p1, p2], op0=AluOp.add, op1=AluOp.add)
    rejects(both_psum, ConstraintError, "cannot both be in PSUM")

    def shapes(k):
        x, y = k.load("x", np.zeros((4, 8), np.float32)), k.load("z", np.zeros((4, 6), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, y], op0=AluOp.add, op1=AluOp.add)
    rejects(shapes, ConstraintError, "data0 is 4x8.*data1 is 4x6")

    def tile(k):
        x, t = k.load("x", np.zeros((4, 8), np.float32)), k.load("t", np.zeros((4, 2), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, x, t], op0=AluOp.add, op1=AluOp.add,
               initial_is_tile=True)
    rejects(tile, ConstraintError, "initial tile is 4x2.*must be 4x1")

    def missing_tile(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8)), [x, x], op0=AluOp.add, op1=AluOp.add,
               initial_is_tile=True)
    rejects(missing_tile, ConstraintError, "takes 3 source operand")

    def bitvec(k):
        x = k.load("x", np.zeros((4, 8), np.int32))
        k.emit(Opcode.TENSOR_TENSOR_SCAN, k.result("y", (4, 8), "int32"), [x, x], op0=AluOp.bitwise_and,
               op1=AluOp.add)
    rejects(bitvec, ConstraintError, "op0=bitwise_and is not allowed")


# ---------------------------------------------------------------- tensor_scalar_cumulative

@pytest.mark.parametrize("executor", EXECUTORS)
def test_cumulative_follows_the_documented_pseudocode(executor):
    """S16: reg = op1(op0(src[i], imm0), reg); dst[i] = reg. reset_reduce starts add/subtract at 0,
    mult at 1, max at -inf, min at +inf; load_reduce at imm1 (here a [P, 1] tile). Note subtract's
    operand order: reg = t - reg."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    start = rng.standard_normal((6, 1)).astype(np.float32)

    def model(op0, op1, imm0, reg):
        out, reg = np.empty_like(x), reg.astype(np.float32)
        for i in range(x.shape[1]):
            reg = op1(op0(x[:, i], np.float32(imm0)).astype(np.float32), reg).astype(np.float32)
            out[:, i] = reg
        return out
    cases = [
        (AluOp.multiply, AluOp.add, 2.0, {}, np.multiply, np.add, np.zeros(6)),
        (AluOp.add, AluOp.subtract, 0.5, {}, np.add, np.subtract, np.zeros(6)),
        (AluOp.subtract, AluOp.maximum, 1.0, {}, np.subtract, np.maximum, np.full(6, -np.inf)),
        (AluOp.add, AluOp.minimum, 0.0, {}, np.add, np.minimum, np.full(6, np.inf)),
        (AluOp.multiply, AluOp.multiply, 1.5, {"load": True, "imm1_is_tile": True}, np.multiply, np.multiply,
         start[:, 0]),
    ]
    for op0, op1, imm0, extra, f0, f1, reg in cases:
        k = OneOp()
        srcs = [k.load("x", x)] + ([k.load("start", start)] if extra else [])
        out = k.result("y", x.shape)
        k.emit(Opcode.TENSOR_SCALAR_CUMULATIVE, out, srcs, op0=op0, op1=op1, imm0=imm0, **extra)
        assert np.array_equal(k.run(executor)["y"], model(f0, f1, imm0, reg)), (op0, op1)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_cumulative_sum_into_bf16_keeps_the_register_in_fp32(executor):
    """The register carries fp32 values; only what dst stores is rounded (to bf16 here)."""
    x = np.full((1, 300), 1.0, np.float32)
    got = run_one(Opcode.TENSOR_SCALAR_CUMULATIVE, (1, 300), "bfloat16", [x], executor,
                  op0=AluOp.multiply, op1=AluOp.add, imm0=1.0, load=True, imm1=0.25)
    want = (0.25 + np.arange(1, 301, dtype=np.float32)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(got[0], want)


def test_cumulative_cost_and_checks():
    """Assumed: max(MIN_II, N); op1 one of add/subtract/mult/max/min; no 32-bit integers (S16)."""
    b = ProgramBuilder()
    t = b.sbuf("t", (128, 100), "bfloat16")
    ins = b.emit(Opcode.TENSOR_SCALAR_CUMULATIVE, t, [t], op0=AluOp.add, op1=AluOp.add, imm0=0.0)
    assert cycles(ins) == 100

    def emit(k, dtype="float32", op1=AluOp.add, **imm):
        x = k.load("x", np.zeros((4, 8), dtype))
        k.emit(Opcode.TENSOR_SCALAR_CUMULATIVE, k.result("y", (4, 8), dtype), [x], op0=AluOp.add, op1=op1,
               imm0=1.0, **imm)
    rejects(lambda k: emit(k, dtype="int32"), DtypeError, "src dtype int32 is not allowed")
    rejects(lambda k: emit(k, op1=AluOp.divide), ConstraintError, "op1=divide is not allowed")
    rejects(lambda k: emit(k, load=True), ConstraintError, "load_reduce needs imm1")
    rejects(lambda k: emit(k, imm1=2.0), ConstraintError, "imm1 .* is read only by load_reduce")
    rejects(lambda k: emit(k, imm0_is_tile=True), ConstraintError, "takes 2 source operand")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_reduce) == {Opcode.TENSOR_REDUCE, Opcode.TENSOR_TENSOR_SCAN,
                                                 Opcode.TENSOR_SCALAR_CUMULATIVE}


def test_unknown_immediates_are_rejected():
    """A misspelt immediate (num_axis) would otherwise be ignored silently."""
    def misspelt(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_REDUCE, k.result("y", (4, 1)), [x], op=AluOp.add, num_axes=1, num_axis=1)
    rejects(misspelt, ConstraintError, r"unknown immediates \['num_axis'\]")
