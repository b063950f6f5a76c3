"""tensor_scalar and scalar_tensor_tensor (sim/engines/vector_tensor_scalar.py): values against
numpy (reverse flags, [P, 1] tile operands, unary and bit operators, ScalarE and GpSimd), the two
executors bit for bit on random data, the documented costs (S23 §2.8, v3 perf modes §2.3, S9
stride rule) and every check."""

import numpy as np
import pytest
from elementwise_cases import (
    EXECUTORS,
    FUZZ,
    I32,
    LOC,
    MIN_II,
    TRN2,
    TRN3,
    F,
    OneOp,
    X,
    Y,
    assert_executors_agree,
    bits_of,
    both_executors,
    elementwise_case,
    emit,
    engine_cycles,
    rejects,
    round_to,
    tile,
)
from hypothesis import given, settings

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import AluOp, Engine, Memory, Opcode, ProgramBuilder
from neuronsim.sim.engines import OPDEFS, vector_tensor_scalar
from neuronsim.sim.engines.alu import alu_np

RNG = np.random.default_rng(4322)


# ---------------------------------------------------------------- tensor_scalar values

@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_scalar_two_ops_with_reverse(rev0, rev1):
    """(data op0 operand0) op1 operand1, reverse flags swapping each operator's inputs."""
    def make():
        k = OneOp()
        d = k.load("d", X)
        k.emit(Opcode.TENSOR_SCALAR, k.result("out", X.shape), [d], op0=AluOp.subtract, operand0=0.75,
               reverse0=rev0, op1=AluOp.divide, operand1=3.0, reverse1=rev1)
        return k
    out = both_executors(make)["out"]
    s0, s1 = np.float32(0.75), np.float32(3.0)
    t = (s0 - X) if rev0 else (X - s0)
    expect = alu_np(AluOp.divide, np.broadcast_to(s1, t.shape), t) if rev1 else alu_np(AluOp.divide, t, s1)
    assert np.array_equal(bits_of(out), bits_of(expect))


def test_tensor_scalar_tile_operands_broadcast_along_free():
    """[P, 1] tiles hold one operand per partition; one op only when op1 is None."""
    scale = RNG.standard_normal((128, 1)).astype(np.float32)
    bias = RNG.standard_normal((128, 1)).astype(np.float32)

    def make():
        k = OneOp()
        d, s, b = k.load("d", X), k.load("s", scale), k.load("b", bias)
        k.emit(Opcode.TENSOR_SCALAR, k.result("fma", X.shape, "bfloat16"), [d, s, b], op0=AluOp.multiply,
               operand0_is_tile=True, op1=AluOp.add, operand1_is_tile=True)
        k.emit(Opcode.TENSOR_SCALAR, k.result("one", X.shape), [d, b], op0=AluOp.maximum,
               operand0_is_tile=True)
        k.emit(Opcode.TENSOR_SCALAR, k.result("mixed", X.shape), [d, b], op0=AluOp.multiply, operand0=2.0,
               op1=AluOp.add, operand1_is_tile=True)
        return k
    out = both_executors(make)
    assert np.array_equal(bits_of(out["fma"]), bits_of(round_to(X * scale + bias, "bfloat16")))
    assert np.array_equal(out["one"], np.maximum(X, bias))
    assert np.array_equal(out["mixed"], X * np.float32(2) + bias)


def test_tensor_scalar_unary_ops_and_immediate_rounding():
    """Unary operators ignore the operand; float immediates are rounded to fp32 first."""
    def make():
        k = OneOp()
        d = k.load("d", np.abs(Y))
        k.emit(Opcode.TENSOR_SCALAR, k.result("r", Y.shape), [d], op0=AluOp.rsqrt, operand0=0.0)
        k.emit(Opcode.TENSOR_SCALAR, k.result("m", Y.shape), [d], op0=AluOp.multiply, operand0=0.1)
        return k
    out = both_executors(make)
    a = np.abs(Y)
    assert np.array_equal(out["r"], (1.0 / np.sqrt(a.astype(np.float64))).astype(np.float32))
    assert np.array_equal(out["m"], a * np.float32(0.1))


def test_tensor_scalar_bitvec_and_shifts():
    """Bit operators: integer immediates and tiles, wrapping to the destination width."""
    d_i = RNG.integers(0, 2**16, size=(16, 32), dtype=np.uint16)
    sh = np.full((16, 1), 4, dtype=np.uint16)

    def make():
        k = OneOp()
        d, s = k.load("d", d_i), k.load("s", sh)
        k.emit(Opcode.TENSOR_SCALAR, k.result("out", d_i.shape, "uint16"), [d, s], op0=AluOp.right_shift,
               operand0_is_tile=True, op1=AluOp.bitwise_and, operand1=0xFF)
        k.emit(Opcode.TENSOR_SCALAR, k.result("inv", d_i.shape, "uint16"), [d], op0=AluOp.invert)
        k.emit(Opcode.TENSOR_SCALAR, k.result("shl", d_i.shape, "uint16"), [d], op0=AluOp.left_shift,
               operand0=12)
        return k
    out = both_executors(make)
    assert np.array_equal(out["out"], (d_i >> 4) & 0xFF)
    assert np.array_equal(out["inv"], ~d_i)
    assert np.array_equal(out["shl"], (d_i.astype(np.int64) << 12).astype(np.uint16))


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_tensor_scalar_on_scalar_and_gpsimd(chip):
    """ScalarE runs mul+add (trn2's allowed pairs); GpSimd runs rsqrt; the values are VectorE's."""
    def make():
        k = OneOp()
        d = k.load("d", np.abs(Y))
        k.emit(Opcode.TENSOR_SCALAR, k.result("act", Y.shape), [d], op0=AluOp.multiply, operand0=3.0,
               op1=AluOp.add, operand1=-1.0, engine=Engine.SCALAR)
        k.emit(Opcode.TENSOR_SCALAR, k.result("rs", Y.shape), [d], op0=AluOp.rsqrt, engine=Engine.GPSIMD)
        return k
    outs = [make().run(e, chip) for e in EXECUTORS]
    for name in outs[0]:
        assert np.array_equal(outs[0][name], outs[1][name])
    a = np.abs(Y)
    assert np.array_equal(outs[0]["act"], a * np.float32(3) + np.float32(-1))
    assert np.array_equal(outs[0]["rs"], (1 / np.sqrt(a.astype(np.float64))).astype(np.float32))


# ---------------------------------------------------------------- scalar_tensor_tensor values

@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, True)])
def test_scalar_tensor_tensor(rev0, rev1):
    """(data op0 operand0) op1 operand1 with operand0 an immediate or a [P, 1] tile."""
    col = RNG.standard_normal((128, 1)).astype(np.float32)

    def make():
        k = OneOp()
        d, o1, c = k.load("d", X), k.load("o1", Y), k.load("c", col)
        k.emit(Opcode.SCALAR_TENSOR_TENSOR, k.result("imm", X.shape), [d, o1], op0=AluOp.subtract,
               operand0=0.5, op1=AluOp.divide, reverse0=rev0, reverse1=rev1)
        k.emit(Opcode.SCALAR_TENSOR_TENSOR, k.result("tile", X.shape, "bfloat16"), [d, c, o1],
               op0=AluOp.multiply, operand0_is_tile=True, op1=AluOp.add)
        return k
    out = both_executors(make)
    t = (np.float32(0.5) - X) if rev0 else (X - np.float32(0.5))
    expect = alu_np(AluOp.divide, Y, t) if rev1 else alu_np(AluOp.divide, t, Y)
    assert np.array_equal(bits_of(out["imm"]), bits_of(expect))
    assert np.array_equal(bits_of(out["tile"]), bits_of(round_to(X * col + Y, "bfloat16")))


# ---------------------------------------------------------------- fuzz: the executors agree

@settings(FUZZ, max_examples=120)
@given(elementwise_case([Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR]))
def test_fuzz_reference_and_numba_agree(case):
    """Random tensor_scalar and scalar_tensor_tensor instructions on random data (NaN, inf, -0,
    subnormals, raw bits): the two executors write the same bits."""
    assert_executors_agree(case)


# ---------------------------------------------------------------- costs (engine cycles from the timeline)

def _ts(n, dtype="float32", dst_dtype=None, dst_mem=Memory.SBUF, engine=Engine.VECTOR, step=1, chip_ops=None):
    op0, op1 = chip_ops or (AluOp.multiply, AluOp.add)

    def build(b):
        a = b.sbuf("a", (128, n * step), dtype)
        d = b.tensor("d", dst_mem, (128, n * step), dst_dtype or dtype)
        ap = lambda t: t.ap([[n * step, 128], [step, n]])  # noqa: E731
        imm = {"op0": op0, "operand0": 2.0}
        if op1 is not None:
            imm.update(op1=op1, operand1=1.0)
        b.emit(Opcode.TENSOR_SCALAR, ap(d), [ap(a)], engine=engine, **imm)
    return build


def test_tensor_scalar_costs():
    """VectorE max(MIN_II, N / speedup): sbuf_16bit (4x) for 16-bit SBUF -> SBUF contiguous,
    other_16bit (2x) for a non-contiguous innermost dim or PSUM; reciprocal 8N. ScalarE N /
    scalar_engine_16bit_speedup (1 on trn2, 2 on trn3). GpSimd rsqrt 4N."""
    sbuf16, other = TRN2.vector_perf_mode_sbuf_16bit_speedup, TRN2.vector_perf_mode_other_16bit_speedup
    assert engine_cycles(_ts(1024)) == pytest.approx(1024)
    assert engine_cycles(_ts(1024, "bfloat16")) == pytest.approx(1024 / sbuf16)
    assert engine_cycles(_ts(1024, "float16", step=2)) == pytest.approx(1024 / other)
    assert engine_cycles(_ts(1024, "bfloat16", dst_mem=Memory.PSUM)) == pytest.approx(1024 / other)
    assert engine_cycles(_ts(1024, "bfloat16", dst_dtype="float32")) == pytest.approx(1024)
    assert engine_cycles(_ts(1024, chip_ops=(AluOp.reciprocal, None))) == pytest.approx(8 * 1024)
    assert engine_cycles(_ts(128, "bfloat16")) == pytest.approx(MIN_II)
    assert engine_cycles(_ts(1024, "bfloat16", engine=Engine.SCALAR)) == pytest.approx(1024)
    assert engine_cycles(_ts(1024, "bfloat16", engine=Engine.SCALAR), TRN3) == pytest.approx(512)
    rsqrt_on_gpsimd = _ts(1024, engine=Engine.GPSIMD, chip_ops=(AluOp.rsqrt, None))
    assert engine_cycles(rsqrt_on_gpsimd) == pytest.approx(4 * 1024)
    assert engine_cycles(_ts(1024, step=5)) == pytest.approx(2 * 1024)  # 20-byte stride


def test_scalar_tensor_tensor_costs():
    """S23: N if bf16 (data, operand1, dst), subtract -> multiply and N even; else 2N; MIN_II floor."""
    def build(n, dtype, op0=AluOp.subtract, op1=AluOp.multiply):
        def f(b):
            a, o, d = (b.sbuf(x, (128, n), dtype) for x in "aod")
            b.emit(Opcode.SCALAR_TENSOR_TENSOR, d, [a, o], op0=op0, operand0=1.0, op1=op1)
        return f
    assert engine_cycles(build(512, "bfloat16")) == pytest.approx(512)
    assert engine_cycles(build(511, "bfloat16")) == pytest.approx(1022)
    assert engine_cycles(build(512, "bfloat16", op1=AluOp.add)) == pytest.approx(1024)
    assert engine_cycles(build(512, "float32")) == pytest.approx(1024)
    assert engine_cycles(build(8, "bfloat16")) == pytest.approx(MIN_II)


# ---------------------------------------------------------------- checks

CHECKS = [
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a"), tile("c", (128, 1))], op0=AluOp.add, operand0=1.0),
     ConstraintError, "takes 1 source"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.add), ConstraintError, "operand0=None"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.add, operand0="x"), ConstraintError,
     "must be a number"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.add, operand0=1.0, operand1_is_tile=True),
     ConstraintError, "op1 is None"),
    (emit(Opcode.SCALAR_TENSOR_TENSOR, F, [tile("a", memory=Memory.PSUM), tile("c", memory=Memory.PSUM)],
           op0=AluOp.add, operand0=1.0, op1=AluOp.add), ConstraintError, "cannot both be in PSUM"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a", dtype="int32")], op0=AluOp.left_shift, operand0=1), DtypeError,
     "dst is float32"),
    (emit(Opcode.TENSOR_SCALAR, I32("d"), [I32("a"), tile("s", (128, 1), "float32")], op0=AluOp.right_shift,
           operand0_is_tile=True), DtypeError, "integer tile"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a"), tile("s", (128, 1), "bfloat16")], op0=AluOp.add,
           operand0_is_tile=True), DtypeError, "float32 or the data's dtype"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a"), tile("s", (128, 2))], op0=AluOp.add, operand0_is_tile=True),
     ConstraintError, r"must be \[128, 1\]"),
    (emit(Opcode.TENSOR_SCALAR, tile("d", dtype="int32"), [tile("a", dtype="int32")], op0=AluOp.left_shift,
           operand0=1.5), ConstraintError, "whole number"),
    (emit(Opcode.TENSOR_SCALAR, tile("d", dtype="int32"), [tile("a", dtype="int32")], op0=AluOp.left_shift,
           operand0=1, op1=AluOp.add, operand1=1.0), ConstraintError, "mixes bit and arithmetic"),
    (emit(Opcode.SCALAR_TENSOR_TENSOR, I32("d"), [I32("a"), I32("c")], op0=AluOp.bitwise_or, operand0=1,
           op1=AluOp.add), ConstraintError, "bitvec operators are not supported"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.subtract, operand0=1.0, engine=Engine.SCALAR),
     ConstraintError, "scalar engine runs"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.multiply, operand0=1.0, engine=Engine.GPSIMD),
     ConstraintError, "only allowed for rsqrt"),
    (emit(Opcode.TENSOR_SCALAR, F, [tile("a")], op0=AluOp.rsqrt, op1=AluOp.multiply, operand1=2.0,
           engine=Engine.GPSIMD), ConstraintError, "only allowed for rsqrt"),
    (emit(Opcode.TENSOR_SCALAR, tile("d", dtype="int32"), [tile("a", dtype="int32")], op0=AluOp.bitwise_and,
           operand0=1, engine=Engine.SCALAR), ConstraintError, "vector engine only"),
]


@pytest.mark.parametrize("build,cls,match", CHECKS)
def test_checks_raise_typed_located_errors(build, cls, match):
    """Every rule of this file raises its error class, naming the kernel line."""
    rejects(build, cls, match)


def test_scalar_engine_takes_any_tensor_scalar_on_trn3():
    """The mul+add / mul / add restriction is trn2's (gen3, S16)."""
    b = ProgramBuilder()
    b.emit(Opcode.TENSOR_SCALAR, b.sbuf("d", (128, 8), "float32"), [b.sbuf("a", (128, 8), "float32")],
           op0=AluOp.subtract, operand0=1.0, engine=Engine.SCALAR, location=LOC)
    sim.prepare(b.build(), "trn3")
    for ops in vector_tensor_scalar.SCALAR_ENGINE_GEN3_OPS:
        b = ProgramBuilder()
        imm = {"op0": ops[0], "operand0": 1.0} | ({"op1": ops[1], "operand1": 2.0} if ops[1] else {})
        b.emit(Opcode.TENSOR_SCALAR, b.sbuf("d", (128, 8), "float32"), [b.sbuf("a", (128, 8), "float32")],
               engine=Engine.SCALAR, **imm)
        sim.prepare(b.build(), "trn2")


def test_every_opcode_of_this_file_is_registered():
    for op in (Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR):
        assert OPDEFS[op] in vector_tensor_scalar.OPS
