"""GpSimd (sim/engines/gpsimd.py): iota, affine_select, tensor_partition_reduce — values on both
executors, the cost formulas (S23; tensor_partition_reduce's is assumed) and every check,
including the generic rule that GpSimd never touches PSUM (S9)."""

import ml_dtypes
import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, LOC, OneOp

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, EngineAccessError
from neuronsim.sim import AluOp, Opcode, ProgramBuilder
from neuronsim.sim.engines import OPDEFS


def _rejects(build, cls, match):
    k = OneOp()
    build(k)
    with pytest.raises(cls, match=match) as err:
        sim.prepare(k.build(), CHIP)
    assert LOC in str(err.value)


def _cycles(ins):
    return OPDEFS[ins.opcode].cycles(ins, CHIP)


def _affine(parts, pattern, offset, multiplier):
    """The documented pseudo code (S16): offset + p*channel_multiplier + sum_k i_k*step_k."""
    values = np.zeros([parts] + [n for _, n in pattern], dtype=np.int64)
    for index in np.ndindex(*values.shape):
        p, rest = index[0], index[1:]
        values[index] = offset + p * multiplier + sum(i * s for i, (s, _) in zip(rest, pattern, strict=True))
    return values.reshape(parts, -1)


# ---------------------------------------------------------------- iota

@pytest.mark.parametrize("executor", EXECUTORS)
def test_iota_pattern_matches_the_documented_pseudo_code(executor):
    pattern = [[-3, 4], [1, 5], [10, 2]]
    k = OneOp()
    out = k.result("io", (16, 40), "int32")
    k.emit(Opcode.IOTA, out, pattern=pattern, offset=7, channel_multiplier=-100)
    assert np.array_equal(k.run(executor)["io"], _affine(16, pattern, 7, -100))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iota_writes_exact_integers_in_the_dst_dtype(executor):
    """Integer dsts get the integer (saturated to the dtype's range); float dsts the value rounded
    once from fp32 (257 is not a bf16: it rounds to even, 256)."""
    k = OneOp()
    f32, bf16 = k.result("f32", (2, 4)), k.result("bf16", (2, 4), "bfloat16")
    u8 = k.result("u8", (2, 4), "uint8")
    for t in (f32, bf16, u8):
        k.emit(Opcode.IOTA, t, pattern=[[1, 4]], offset=255, channel_multiplier=2)
    out = k.run(executor)
    want = _affine(2, [[1, 4]], 255, 2)
    assert np.array_equal(out["f32"], want.astype(np.float32))
    assert np.array_equal(out["bf16"], want.astype(np.float32).astype(ml_dtypes.bfloat16))
    assert out["bf16"][0, 2] == 256
    assert np.array_equal(out["u8"], np.minimum(want, 255))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_iota_into_a_strided_dst(executor):
    """dst's own access pattern takes the values in its row-major order (odd columns here)."""
    k = OneOp()
    out = k.result("io", (4, 8), "int32")
    k.emit(Opcode.IOTA, out.ap([[8, 4], [2, 4]], offset=1), pattern=[[1, 4]], offset=1, channel_multiplier=0)
    got = k.run(executor)["io"]
    assert np.array_equal(got[:, 1::2], np.tile(np.arange(1, 5), (4, 1)))


def test_iota_checks():
    def product(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"), pattern=[[1, 3], [3, 2]])
    _rejects(product, ConstraintError, r"generates 6 values per partition but dst has 8")

    def overflow(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"), pattern=[[2**30, 8]])
    _rejects(overflow, ConstraintError, r"span 0..7516192768, outside int32")

    def partition_overflow(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"), pattern=[[1, 8]], channel_multiplier=-2**30)
    _rejects(partition_overflow, ConstraintError, "outside int32")

    def too_many_dims(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 32), "int32"), pattern=[[1, 2]] * 5)
    _rejects(too_many_dims, ConstraintError, "pattern has 5 dims; it has 1 to 4")

    def no_pattern(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"))
    _rejects(no_pattern, ConstraintError, "needs the immediate 'pattern'")

    def with_source(k):
        x = k.load("x", np.zeros((4, 8), np.int32))
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"), [x], pattern=[[1, 8]])
    _rejects(with_source, ConstraintError, "takes 0 source operand")


# ---------------------------------------------------------------- affine_select

@pytest.mark.parametrize("executor", EXECUTORS)
def test_affine_select_causal_mask(executor):
    """The S16 use case: keep on_true where p - i >= 0 (p*1 + i*(-1) + 0 >= 0), else on_false_value."""
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    out = OneOp()
    src = out.load("x", x)
    dst = out.result("y", (32, 32))
    out.emit(Opcode.AFFINE_SELECT, dst, [src], pattern=[[-1, 32]], offset=0, channel_multiplier=1,
             cmp_op=AluOp.greater_equal, on_false_value=-3.0e38)
    got = out.run(executor)["y"]
    assert np.array_equal(got, np.where(np.tril(np.ones((32, 32), bool)), x, np.float32(-3.0e38)))


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("op, keep", [
    (AluOp.equal, lambda v: v == 0), (AluOp.not_equal, lambda v: v != 0),
    (AluOp.greater, lambda v: v > 0), (AluOp.greater_equal, lambda v: v >= 0),
    (AluOp.less, lambda v: v < 0), (AluOp.less_equal, lambda v: v <= 0),
])
def test_affine_select_compare_ops(executor, op, keep):
    x = np.arange(48, dtype=np.float32).reshape(4, 12) + 1
    pattern = [[2, 3], [-1, 4]]
    k = OneOp()
    dst = k.result("y", (4, 12))
    k.emit(Opcode.AFFINE_SELECT, dst, [k.load("x", x)], pattern=pattern, offset=-3, channel_multiplier=1,
           cmp_op=op, on_false_value=0.5)
    want = np.where(keep(_affine(4, pattern, -3, 1)), x, np.float32(0.5))
    assert np.array_equal(k.run(executor)["y"], want)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_affine_select_same_dtype_moves_bits_other_dtypes_round(executor):
    """S16: selected elements are cast through fp32 only when dtypes differ; with one dtype they move
    bit for bit (a NaN payload survives). on_false_value is fp32, rounded to dst's dtype."""
    bits = np.array([[0x7F800001, 0x3F800001, 0x12345678, 0xFFC00123]], dtype=np.uint32)
    k = OneOp()
    src = k.load("x", bits.view(np.float32))
    same, other = k.result("same", (1, 4)), k.result("other", (1, 4), "bfloat16")
    for t in (same, other):
        k.emit(Opcode.AFFINE_SELECT, t, [src], pattern=[[1, 4]], offset=-2, channel_multiplier=0,
               cmp_op=AluOp.less, on_false_value=1.00390625)
    out = k.run(executor)
    assert list(out["same"].view(np.uint32)[0, :2]) == [0x7F800001, 0x3F800001]
    assert np.all(out["same"][0, 2:] == np.float32(1.00390625))
    assert out["other"].view(np.uint16)[0, 1] == 0x3F80  # 1.0000001 rounded to bf16
    assert out["other"][0, 3] == ml_dtypes.bfloat16(1.00390625)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_affine_select_integer_dst(executor):
    x = np.arange(8, dtype=np.int32).reshape(1, 8) * 1000
    k = OneOp()
    dst = k.result("y", (1, 8), "int8")
    k.emit(Opcode.AFFINE_SELECT, dst, [k.load("x", x)], pattern=[[1, 8]], offset=-1,
           cmp_op=AluOp.less_equal, on_false_value=-2.5)
    assert list(k.run(executor)["y"][0]) == [0, 127, -2, -2, -2, -2, -2, -2]  # saturates; -2.5 -> -2 (RNE)


def test_affine_select_checks():
    def shape(k):
        k.emit(Opcode.AFFINE_SELECT, k.result("y", (4, 8)), [k.load("x", np.zeros((4, 6), np.float32))],
               pattern=[[1, 8]], on_false_value=0.0)
    _rejects(shape, ConstraintError, "dst is 4x8.*on_true is 4x6")

    def not_a_compare(k):
        k.emit(Opcode.AFFINE_SELECT, k.result("y", (4, 8)), [k.load("x", np.zeros((4, 8), np.float32))],
               pattern=[[1, 8]], cmp_op=AluOp.add, on_false_value=0.0)
    _rejects(not_a_compare, ConstraintError, "cmp_op=add is not a comparison")

    def no_false_value(k):
        k.emit(Opcode.AFFINE_SELECT, k.result("y", (4, 8)), [k.load("x", np.zeros((4, 8), np.float32))],
               pattern=[[1, 8]])
    _rejects(no_false_value, ConstraintError, "on_false_value=None must be a number")


def test_iota_and_affine_select_cost():
    """S23: iota 150 + N, affine_select GPSIMD_START + N (GPSIMD_START ~ 150)."""
    b = ProgramBuilder()
    t = b.sbuf("t", (128, 500), "float32")
    assert _cycles(b.emit(Opcode.IOTA, t, pattern=[[1, 500]])) == CHIP.gpsimd_start_cycles + 500 == 650
    assert _cycles(b.emit(Opcode.AFFINE_SELECT, t, [t], pattern=[[1, 500]], on_false_value=0.0)) == 650
    tl = sim.prepare(b.build(), CHIP).timeline
    assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(650 / 1.2)  # GpSimd at 1.2 GHz


# ---------------------------------------------------------------- tensor_partition_reduce

@pytest.mark.parametrize("executor", EXECUTORS)
def test_partition_reduce_add_in_partition_order(executor):
    """Folds across partitions 0, 1, ... in fp32: column 0 is (((1e8 + 1) - 1e8) + 1) = 1."""
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    x[:, 0] = [1e8, 1, -1e8, 1]
    got = OneOp()
    src = got.load("x", x)
    dst = got.result("s", (1, 6))
    got.emit(Opcode.TENSOR_PARTITION_REDUCE, dst, [src], op=AluOp.add)
    s = got.run(executor)["s"]
    want = x[0]
    for p in range(1, 4):
        want = want + x[p]
    assert np.array_equal(s[0], want) and s[0, 0] == 1.0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_partition_reduce_max_and_bitvec(executor):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 5)).astype(np.float32)
    ints = rng.integers(-2**31, 2**31, size=(20, 3), dtype=np.int32)
    k = OneOp()
    fx, ix = k.load("x", x), k.load("i", ints)
    mx = k.result("mx", (1, 5), "bfloat16")
    orr, andd = k.result("or", (1, 3), "int32"), k.result("and", (1, 3), "int32")
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, mx, [fx], op=AluOp.maximum)
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, orr, [ix], op=AluOp.bitwise_or)
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, andd, [ix], op=AluOp.bitwise_and)
    out = k.run(executor)
    assert np.array_equal(out["mx"][0], x.max(0).astype(ml_dtypes.bfloat16))
    assert np.array_equal(out["or"][0], np.bitwise_or.reduce(ints, axis=0))
    assert np.array_equal(out["and"][0], np.bitwise_and.reduce(ints, axis=0))


def test_partition_reduce_cost():
    """Assumed (not documented): GPSIMD_START + N * ceil(P / 16), 16 partitions per GpSimd core (S9)."""
    b = ProgramBuilder()
    x, y = b.sbuf("x", (128, 10), "float32"), b.sbuf("y", (1, 10), "float32")
    def cost(src):
        return _cycles(b.emit(Opcode.TENSOR_PARTITION_REDUCE, y, [src], op=AluOp.add))
    assert cost(x) == 150 + 10 * 8
    assert cost(x.ap([[10, 17], [1, 10]])) == 150 + 10 * 2
    assert cost(x.ap([[10, 1], [1, 10]])) == 150 + 10


def test_partition_reduce_checks():
    def dst_partitions(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_PARTITION_REDUCE, k.result("y", (2, 8)), [x], op=AluOp.add)
    _rejects(dst_partitions, ConstraintError, "dst is 2x8.*must be 1x8")

    def op(k):
        x = k.load("x", np.zeros((4, 8), np.float32))
        k.emit(Opcode.TENSOR_PARTITION_REDUCE, k.result("y", (1, 8)), [x], op=AluOp.minimum)
    _rejects(op, ConstraintError, "op=minimum is not allowed.*add, bitwise_and, bitwise_or, maximum")

    def bitvec_float(k):
        k.emit(Opcode.TENSOR_PARTITION_REDUCE, k.result("y", (1, 8), "int32"),
               [k.load("x", np.zeros((4, 8), np.float32))], op=AluOp.bitwise_or)
    _rejects(bitvec_float, DtypeError, "data dtype float32 is not an integer dtype")


# ---------------------------------------------------------------- GpSimd never touches PSUM (S9)

def _psum_case(opcode, where):
    def build(k):
        p = k.b.psum("p", (4, 8), "float32")
        s = k.b.sbuf("s", (4, 8), "float32")
        one = k.b.sbuf("one", (1, 8), "float32")
        if opcode is Opcode.IOTA:
            k.emit(opcode, p, pattern=[[1, 8]])
        elif opcode is Opcode.AFFINE_SELECT:
            dst, src = (p, s) if where == "dst" else (s, p)
            k.emit(opcode, dst, [src], pattern=[[1, 8]], on_false_value=0.0)
        else:
            k.emit(opcode, one, [p], op=AluOp.add)
    return build


@pytest.mark.parametrize("opcode, where, verb", [
    (Opcode.IOTA, "dst", "write"), (Opcode.AFFINE_SELECT, "dst", "write"),
    (Opcode.AFFINE_SELECT, "src", "read"), (Opcode.TENSOR_PARTITION_REDUCE, "src", "read"),
])
def test_gpsimd_never_touches_psum(opcode, where, verb):
    _rejects(_psum_case(opcode, where), EngineAccessError, f"gpsimd engine cannot {verb} PSUM")


def test_unknown_immediates_are_rejected():
    def misspelt(k):
        k.emit(Opcode.IOTA, k.result("io", (4, 8), "int32"), pattern=[[1, 8]], channel_multipler=1)
    _rejects(misspelt, ConstraintError, r"unknown immediates \['channel_multipler'\]")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_partition_reduce_int32_is_native_integer(executor):
    """add/max on int32/uint32 use GpSimd's native 32-bit integers (exact beyond 2**24, wrapping to
    dst's width), as tensor_tensor on GpSimd does; other dtypes fold in fp32."""
    x = np.array([[16777217, 2**31 - 1, -5], [0, 1, -7]], dtype=np.int32)
    k = OneOp()
    src = k.load("x", x)
    total, top = k.result("sum", (1, 3), "int32"), k.result("max", (1, 3), "int32")
    as_f32 = k.result("f", (1, 3))
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, total, [src], op=AluOp.add)
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, top, [src], op=AluOp.maximum)
    k.emit(Opcode.TENSOR_PARTITION_REDUCE, as_f32, [src], op=AluOp.add)
    out = k.run(executor)
    assert list(out["sum"][0]) == [16777217, -2**31, -12]
    assert list(out["max"][0]) == [16777217, 2**31 - 1, -5]
    assert out["f"][0, 0] == np.float32(16777216.0)  # fp32 path: 16777217 is not an fp32
