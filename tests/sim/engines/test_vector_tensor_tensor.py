"""tensor_tensor (sim/engines/vector_tensor_tensor.py) on VectorE and GpSimd: values against numpy
(arithmetic, bit and native-integer operators, rounding to the destination), access patterns and
aliasing, the two executors bit for bit on random data, the documented cost (S23 §2.8, v3 perf
modes §2.3, S9 stride rule) and every check."""

import math

import numpy as np
import pytest
from elementwise_cases import (
    BF16,
    FUZZ,
    MIN_II,
    TRN2,
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
    f32_of,
    rejects,
    round_to,
    tile,
)
from hypothesis import given, settings

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import AluOp, Engine, Memory, Opcode, ProgramBuilder
from neuronsim.sim.dtypes import dtype_of
from neuronsim.sim.engines import OPDEFS, vector_tensor_tensor
from neuronsim.sim.engines.alu import alu_np

RNG = np.random.default_rng(4321)


# ---------------------------------------------------------------- tensor_tensor values

ARITH_OPS = [AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.divide, AluOp.maximum, AluOp.minimum,
             AluOp.power, AluOp.greater, AluOp.less_equal, AluOp.logical_xor, AluOp.abs_max, AluOp.mod]


@pytest.mark.parametrize("op", ARITH_OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("engine", [Engine.VECTOR, Engine.GPSIMD], ids=lambda e: e.name.lower())
def test_tensor_tensor_matches_alu(op, engine):
    """dst = data1 op data2 in fp32 (one rounding), on VectorE and GpSimd, both executors."""
    def make():
        k = OneOp()
        a, b = k.load("a", X), k.load("b", np.abs(Y) if op is AluOp.power else Y)
        k.emit(Opcode.TENSOR_TENSOR, k.result("out", X.shape), [a, b], op=op, engine=engine)
        return k
    out = both_executors(make)["out"]
    expect = alu_np(op, X, np.abs(Y) if op is AluOp.power else Y)
    assert np.array_equal(bits_of(out), bits_of(expect))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int8", "uint16"])
def test_tensor_tensor_rounds_once_to_dst(dtype):
    """fp32 sum, then RNE to the destination dtype on the write (ints saturate)."""
    def make():
        k = OneOp()
        a, b = k.load("a", X * 50), k.load("b", Y * 50)
        k.emit(Opcode.TENSOR_TENSOR, k.result("out", X.shape, dtype), [a, b], op=AluOp.add)
        return k
    out = both_executors(make)["out"]
    total = X * 50 + Y * 50
    if dtype_of(dtype).is_int:
        info = np.iinfo(dtype_of(dtype).numpy)
        expect = np.clip(np.rint(total), info.min, info.max).astype(dtype_of(dtype).numpy)
    else:
        expect = round_to(total, dtype)
    assert np.array_equal(bits_of(out), bits_of(expect))


def test_tensor_tensor_bf16_inputs_and_psum_operand():
    """Low-precision inputs are widened exactly; one input may come from PSUM."""
    xb, yb = X.astype(BF16), Y.astype(BF16)

    def make():
        k = OneOp()
        a = k.load("a", xb, Memory.PSUM)
        b = k.load("b", yb)
        k.emit(Opcode.TENSOR_TENSOR, k.result("out", X.shape), [a, b], op=AluOp.multiply)
        return k
    out = both_executors(make)["out"]
    assert np.array_equal(out, f32_of(xb) * f32_of(yb))


def test_tensor_tensor_bitvec_on_integers():
    """Bit operators work on the integer values and wrap to the destination's width."""
    a_i = RNG.integers(-2**31, 2**31, size=(32, 16), dtype=np.int32)
    s_i = RNG.integers(0, 40, size=(32, 16), dtype=np.int32)
    for op, ref in ((AluOp.bitwise_xor, np.bitwise_xor), (AluOp.bitwise_and, np.bitwise_and),
                    (AluOp.left_shift, None)):
        def make(op=op):
            k = OneOp()
            a, s = k.load("a", a_i), k.load("s", s_i)
            k.emit(Opcode.TENSOR_TENSOR, k.result("out", a_i.shape, "int32"), [a, s], op=op)
            return k
        out = both_executors(make)["out"]
        if ref is None:
            expect = ((a_i.astype(np.int64) << s_i) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        else:
            expect = ref(a_i, s_i)
        assert np.array_equal(out, expect), op


def test_gpsimd_int32_is_native_integer_arithmetic():
    """S16: all-int32 tensor_tensor on GpSimd is exact integer arithmetic (wrapping); on VectorE
    the same instruction computes in fp32."""
    a_i = np.full((4, 8), 2**30 + 1, dtype=np.int32)
    b_i = np.full((4, 8), 2**30, dtype=np.int32)
    outs = {}
    for engine in (Engine.GPSIMD, Engine.VECTOR):
        def make(engine=engine):
            k = OneOp()
            a, b = k.load("a", a_i), k.load("b", b_i)
            k.emit(Opcode.TENSOR_TENSOR, k.result("sum", a_i.shape, "int32"), [a, b], op=AluOp.add,
                   engine=engine)
            k.emit(Opcode.TENSOR_TENSOR, k.result("gt", a_i.shape, "int32"), [a, b], op=AluOp.greater,
                   engine=engine)
            return k
        outs[engine] = both_executors(make)
    assert np.all(outs[Engine.GPSIMD]["sum"] == np.int32(-2**31 + 1))  # 2**31 + 1 wraps
    assert np.all(outs[Engine.GPSIMD]["gt"] == 1)
    assert np.all(outs[Engine.VECTOR]["sum"] == np.int32(2**31 - 1))  # fp32 2**31, saturated
    assert np.all(outs[Engine.VECTOR]["gt"] == 0)  # both round to 2**30 in fp32


# ---------------------------------------------------------------- access patterns and aliasing
#
# Through tensor_tensor and tensor_scalar: the row offsets, block streaming and fused paths they share.

def test_strided_and_multi_dim_access_patterns():
    """Non-contiguous and 3-D free patterns read and write the right elements."""
    def make():
        k = OneOp()
        a = k.load("a", X)
        out = k.result("out", (128, 32))
        k.emit(Opcode.TENSOR_TENSOR, out, [a.ap([[64, 128], [2, 32]]), a.ap([[64, 128], [2, 32]], offset=1)],
               op=AluOp.subtract)
        t = k.result("t", (128, 4, 8))
        k.emit(Opcode.TENSOR_SCALAR, t.ap([[32, 128], [1, 8], [8, 4]]), [a.ap([[64, 128], [8, 4], [1, 8]])],
               op0=AluOp.multiply, operand0=2.0)
        return k
    out = both_executors(make)
    assert np.array_equal(out["out"], X[:, 0::2] - X[:, 1::2])
    expect = np.empty((128, 32), np.float32)
    for m in range(32):  # element m of the source order lands at the m-th address of the dst order
        i, k_ = divmod(m, 4)
        expect[:, i + 8 * k_] = X[:, m] * 2
    assert np.array_equal(out["t"].reshape(128, 32), expect)


def test_overlapping_in_place_shift_reads_before_writing():
    """dst = src shifted by one element within a partition: every source is read before any write
    (the reference's semantics), in place as well."""
    def make():
        k = OneOp()
        a = k.load("a", X)
        k.emit(Opcode.TENSOR_TENSOR, a.ap([[64, 128], [1, 63]], offset=1),
               [a.ap([[64, 128], [1, 63]]), a.ap([[64, 128], [1, 63]])], op=AluOp.add)
        b = k.load("b", Y)
        k.emit(Opcode.TENSOR_SCALAR, b, [b], op0=AluOp.multiply, operand0=-1.0)
        k.results += [a, b]
        return k
    out = both_executors(make)
    expect = X.copy()
    expect[:, 1:] = X[:, :63] + X[:, :63]
    assert np.array_equal(out["a"], expect)
    assert np.array_equal(out["b"], -Y)


# ---------------------------------------------------------------- fuzz: the executors agree

@settings(FUZZ, max_examples=80)
@given(elementwise_case([Opcode.TENSOR_TENSOR]))
def test_fuzz_reference_and_numba_agree(case):
    """Random tensor_tensor instructions (both engines, every operator kind) on random data (NaN,
    inf, -0, subnormals, raw bits): the two executors write the same bits."""
    assert_executors_agree(case)


# ---------------------------------------------------------------- costs (engine cycles from the timeline)

def _tt(n, dtypes=("float32",) * 3, mems=(Memory.SBUF, Memory.SBUF), op=AluOp.add, engine=Engine.VECTOR,
        step=1):
    def build(b):
        a = b.tensor("a", mems[0], (128, n * step), dtypes[0])
        c = b.tensor("c", mems[1], (128, n * step), dtypes[1])
        d = b.sbuf("d", (128, n * step), dtypes[2])
        ap = lambda t: t.ap([[n * step, 128], [step, n]])  # noqa: E731
        b.emit(Opcode.TENSOR_TENSOR, ap(d), [ap(a), ap(c)], op=op, engine=engine)
    return build


def test_tensor_tensor_costs():
    """S23: max(MIN_II, N) with one input in PSUM and one in SBUF, or all bf16 + add/sub/mul +
    contiguous + both in SBUF; else max(MIN_II, 2N). v3 perf mode: / other_16bit_speedup with both
    inputs in SBUF and all tensors 16-bit. GpSimd: 2N. S9: x2 for an innermost stride > 16 B."""
    other = TRN2.vector_perf_mode_other_16bit_speedup
    assert engine_cycles(_tt(512)) == pytest.approx(1024)
    assert engine_cycles(_tt(512, mems=(Memory.PSUM, Memory.SBUF))) == pytest.approx(512)
    assert engine_cycles(_tt(512, dtypes=("bfloat16",) * 3)) == pytest.approx(512 / other)
    assert engine_cycles(_tt(512, dtypes=("bfloat16",) * 3, op=AluOp.maximum)) == pytest.approx(1024 / other)
    assert engine_cycles(_tt(512, dtypes=("float16",) * 3)) == pytest.approx(1024 / other)
    assert engine_cycles(_tt(512, dtypes=("bfloat16", "bfloat16", "float32"))) == pytest.approx(1024)
    assert engine_cycles(_tt(16)) == pytest.approx(MIN_II)
    assert engine_cycles(_tt(512, engine=Engine.GPSIMD)) == pytest.approx(1024)
    assert engine_cycles(_tt(512, step=4)) == pytest.approx(1024)  # 16-byte stride: no penalty
    assert engine_cycles(_tt(512, step=8)) == pytest.approx(2048 * TRN2.access_stride_penalty_factor / 2)


def test_costs_use_the_engine_clock():
    """Cycles convert to time with the issuing engine's clock (trn2 VectorE 0.96 GHz, trn3 1.2)."""
    b = ProgramBuilder("clock")
    b.emit(Opcode.TENSOR_TENSOR, b.sbuf("d", (128, 960), "float32"),
           [b.sbuf("a", (128, 960), "float32"), b.sbuf("c", (128, 960), "float32")], op=AluOp.add)
    program = b.build()
    for chip, ghz in (("trn2", 0.96), ("trn3", 1.2)):
        tl = sim.prepare(program, chip).timeline
        assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(1920 / ghz)


# ---------------------------------------------------------------- checks

CHECKS = [
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a")], op=AluOp.add), ConstraintError, "takes 2 source"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a"), tile("c", (128, 32))], op=AluOp.add), ConstraintError,
     "data1 is 128x64"),
    (emit(Opcode.TENSOR_TENSOR, tile("d", (64, 64)), [tile("a"), tile("c")], op=AluOp.add), ConstraintError,
     "dst is 64x64"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a"), tile("c")]), ConstraintError, "needs the immediate 'op'"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a"), tile("c")], op=99), ConstraintError, "not an ALU operator"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a"), tile("c")], op=AluOp.add, opp=1), ConstraintError,
     "unknown immediate"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a"), tile("c")], op=AluOp.abs), ConstraintError, "unary"),
    (emit(Opcode.TENSOR_TENSOR, F, [tile("a", memory=Memory.PSUM), tile("c", memory=Memory.PSUM)],
          op=AluOp.add),
     ConstraintError, "cannot both be in PSUM"),
    (emit(Opcode.TENSOR_TENSOR, tile("d", dtype="int32"), [tile("a"), tile("c", dtype="int32")],
           op=AluOp.bitwise_and), DtypeError, "data1 is float32"),
]


@pytest.mark.parametrize("build,cls,match", CHECKS)
def test_checks_raise_typed_located_errors(build, cls, match):
    """Every rule of this file raises its error class, naming the kernel line."""
    rejects(build, cls, match)


def test_power_and_int32_run_on_vector_too():
    """'power and int32/uint32 default to GpSimd' (S16) is a default, not a rule."""
    b = ProgramBuilder()
    b.emit(Opcode.TENSOR_TENSOR, b.sbuf("d", (128, 8), "int32"),
           [b.sbuf("a", (128, 8), "int32"), b.sbuf("c", (128, 8), "int32")], op=AluOp.power)
    assert sim.prepare(b.build()).program.instructions[0].engine is Engine.VECTOR


def test_every_opcode_of_this_file_is_registered():
    for op in (Opcode.TENSOR_TENSOR,):
        assert OPDEFS[op] in vector_tensor_tensor.OPS
    assert math.isclose(TRN2.vector_engine_clock_hz, 0.96e9)
