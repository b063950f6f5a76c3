"""VectorE elementwise family (sim/engines/vector.py): tensor_tensor, tensor_scalar,
scalar_tensor_tensor, tensor_copy, memset, tensor_copy_predicated, select — values against numpy,
the two executors bit for bit on random data (NaN, inf, -0, low-precision and integer dtypes), the
documented cost of each case (S23 §2.8, v3 perf modes §2.3, S9 stride rule) and every check."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, NeuronSimError
from neuronsim.sim import AluOp, Engine, Memory, Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType, dtype_of
from neuronsim.sim.engines import OPDEFS, vector
from neuronsim.sim.engines.alu import alu_np
from neuronsim.sim.ir import BITVEC_ALU_OPS
from neuronsim.sim.memory.numerics import decode, encode

EXECUTORS = ["numba", "reference"]
LOC = "my_kernel.py:42"
TRN2, TRN3 = get_chip("trn2"), get_chip("trn3")
MIN_II = TRN2.min_ii_cycles
BF16 = ml_dtypes.bfloat16
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class OneOp:
    """A Program around one instruction: DMA the inputs into on-chip tensors (bit-exact: same
    dtype), run it, DMA the results out."""

    def __init__(self):
        self.b = ProgramBuilder("one_op")
        self.inputs: dict[str, np.ndarray] = {}
        self.results = []

    def load(self, name, array, memory=Memory.SBUF):
        dtype = dtype_of(array.dtype)
        h = self.b.hbm(name + "_in", array.shape, dtype)
        t = self.b.tensor(name, memory, array.shape, dtype)
        self.b.emit(Opcode.DMA_COPY if memory is Memory.SBUF else Opcode.TENSOR_COPY,
                    t, [h if memory is Memory.SBUF else self._staged(name, h, dtype)])
        self.inputs[h.name] = array
        return t

    def _staged(self, name, h, dtype):
        s = self.b.sbuf(name + "_stage", h.shape, dtype)
        self.b.emit(Opcode.DMA_COPY, s, [h])
        return s

    def result(self, name, shape, dtype="float32", init=None):
        t = self.b.sbuf(name, shape, dtype)
        if init is not None:
            h = self.b.hbm(name + "_init", shape, dtype)
            self.b.emit(Opcode.DMA_COPY, t, [h])
            self.inputs[h.name] = init
        self.results.append(t)
        return t

    def emit(self, opcode, dst, srcs=(), **kw):
        return self.b.emit(opcode, dst, srcs, location=LOC, **kw)

    def build(self):
        for t in self.results:
            self.b.emit(Opcode.DMA_COPY, self.b.hbm(t.name + "_out", t.shape, t.dtype, kind="output"), [t])
        return self.b.build()

    def run(self, executor, chip="trn2"):
        out = sim.run(self.build(), self.inputs, chip, executor=executor, uninitialized_memory="zero").outputs
        return {t.name: out[t.name + "_out"] for t in self.results}


def _both(make):
    """Run the OneOp built by ``make()`` on both executors; assert bit equality; return outputs."""
    results = [make().run(e) for e in EXECUTORS]
    for name in results[0]:
        a, b = results[0][name], results[1][name]
        assert np.array_equal(_bits(a), _bits(b)), (name, a, b)
    return results[0]


def _bits(a):
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _f32_of(a):
    return np.asarray(a).astype(np.float32)


def _round(values, dtype):
    """fp32 values rounded to ``dtype`` (RNE), as the simulator writes them."""
    return np.asarray(values, np.float32).astype(dtype_of(dtype).numpy)


RNG = np.random.default_rng(1234)
X = RNG.standard_normal((128, 64)).astype(np.float32)
Y = RNG.standard_normal((128, 64)).astype(np.float32) + 0.5


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
    out = _both(make)["out"]
    expect = alu_np(op, X, np.abs(Y) if op is AluOp.power else Y)
    assert np.array_equal(_bits(out), _bits(expect))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int8", "uint16"])
def test_tensor_tensor_rounds_once_to_dst(dtype):
    """fp32 sum, then RNE to the destination dtype on the write (ints saturate)."""
    def make():
        k = OneOp()
        a, b = k.load("a", X * 50), k.load("b", Y * 50)
        k.emit(Opcode.TENSOR_TENSOR, k.result("out", X.shape, dtype), [a, b], op=AluOp.add)
        return k
    out = _both(make)["out"]
    total = X * 50 + Y * 50
    if dtype_of(dtype).is_int:
        info = np.iinfo(dtype_of(dtype).numpy)
        expect = np.clip(np.rint(total), info.min, info.max).astype(dtype_of(dtype).numpy)
    else:
        expect = _round(total, dtype)
    assert np.array_equal(_bits(out), _bits(expect))


def test_tensor_tensor_bf16_inputs_and_psum_operand():
    """Low-precision inputs are widened exactly; one input may come from PSUM."""
    xb, yb = X.astype(BF16), Y.astype(BF16)

    def make():
        k = OneOp()
        a = k.load("a", xb, Memory.PSUM)
        b = k.load("b", yb)
        k.emit(Opcode.TENSOR_TENSOR, k.result("out", X.shape), [a, b], op=AluOp.multiply)
        return k
    out = _both(make)["out"]
    assert np.array_equal(out, _f32_of(xb) * _f32_of(yb))


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
        out = _both(make)["out"]
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
        outs[engine] = _both(make)
    assert np.all(outs[Engine.GPSIMD]["sum"] == np.int32(-2**31 + 1))  # 2**31 + 1 wraps
    assert np.all(outs[Engine.GPSIMD]["gt"] == 1)
    assert np.all(outs[Engine.VECTOR]["sum"] == np.int32(2**31 - 1))  # fp32 2**31, saturated
    assert np.all(outs[Engine.VECTOR]["gt"] == 0)  # both round to 2**30 in fp32


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
    out = _both(make)["out"]
    s0, s1 = np.float32(0.75), np.float32(3.0)
    t = (s0 - X) if rev0 else (X - s0)
    expect = alu_np(AluOp.divide, np.broadcast_to(s1, t.shape), t) if rev1 else alu_np(AluOp.divide, t, s1)
    assert np.array_equal(_bits(out), _bits(expect))


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
    out = _both(make)
    assert np.array_equal(_bits(out["fma"]), _bits(_round(X * scale + bias, "bfloat16")))
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
    out = _both(make)
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
    out = _both(make)
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
    out = _both(make)
    t = (np.float32(0.5) - X) if rev0 else (X - np.float32(0.5))
    expect = alu_np(AluOp.divide, Y, t) if rev1 else alu_np(AluOp.divide, t, Y)
    assert np.array_equal(_bits(out["imm"]), _bits(expect))
    assert np.array_equal(_bits(out["tile"]), _bits(_round(X * col + Y, "bfloat16")))


# ---------------------------------------------------------------- tensor_copy / memset values

@pytest.mark.parametrize("engine", [Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD],
                         ids=lambda e: e.name.lower())
def test_tensor_copy_bit_exact_or_cast(engine):
    """Same dtype: bits move (NaN payloads, int32 beyond 2**24); different: via fp32, RNE."""
    bits = RNG.integers(0, 2**32, size=(64, 32), dtype=np.uint32)
    nan_payloads = bits.view(np.float32)
    big = RNG.integers(-2**31, 2**31, size=(64, 32), dtype=np.int32)

    def make():
        k = OneOp()
        f, i, x = k.load("f", nan_payloads), k.load("i", big), k.load("x", X[:64, :32].copy())
        k.emit(Opcode.TENSOR_COPY, k.result("f_out", f.shape, "float32"), [f], engine=engine)
        k.emit(Opcode.TENSOR_COPY, k.result("i_out", i.shape, "int32"), [i], engine=engine)
        k.emit(Opcode.TENSOR_COPY, k.result("bf", x.shape, "bfloat16"), [x], engine=engine)
        k.emit(Opcode.TENSOR_COPY, k.result("i8", x.shape, "int8"), [x], engine=engine)
        return k
    out = _both(make)
    assert np.array_equal(_bits(out["f_out"]), bits)
    assert np.array_equal(out["i_out"], big)
    assert np.array_equal(_bits(out["bf"]), _bits(_round(X[:64, :32], "bfloat16")))
    assert np.array_equal(out["i8"], np.rint(X[:64, :32]).astype(np.int8))


@pytest.mark.parametrize("engine", [Engine.VECTOR, Engine.GPSIMD], ids=lambda e: e.name.lower())
def test_memset_exact_ints_and_rounded_floats(engine):
    """memset: whole numbers land exactly in integer dtypes (saturating), others round via fp32."""
    cases = [("int32", 2**31 - 1, np.int32(2**31 - 1)), ("uint8", -5, np.uint8(0)),
             ("int16", 2.5, np.int16(2)),
             ("bfloat16", 0.1, np.float32(0.1).astype(BF16)), ("float32", -0.0, np.float32(-0.0)),
             ("float8_e4m3", 1000.0, np.float32(np.inf).astype(ml_dtypes.float8_e4m3)),
             ("uint32", 2**32 - 1, np.uint32(2**32 - 1)), ("bool_", 3, np.bool_(True))]

    def make():
        k = OneOp()
        for i, (dtype, value, _) in enumerate(cases):
            k.emit(Opcode.MEMSET, k.result(f"m{i}", (32, 8), dtype), value=value, engine=engine)
        return k
    out = _both(make)
    for i, (dtype, _, expect) in enumerate(cases):
        assert np.array_equal(_bits(out[f"m{i}"]), _bits(np.full((32, 8), expect))), dtype


# ---------------------------------------------------------------- tensor_copy_predicated / select values

@pytest.mark.parametrize("reverse", [False, True])
def test_copy_predicated_keeps_old_bits(reverse):
    """dst[i] = src[i] where (pred != 0) xor reverse_pred, else dst keeps its bits (NaN payloads too)."""
    old = RNG.integers(0, 2**32, size=(32, 16), dtype=np.uint32).view(np.float32)
    src = RNG.standard_normal((32, 16)).astype(np.float32)
    pred = RNG.integers(0, 3, size=(32, 16), dtype=np.uint8)

    def make():
        k = OneOp()
        s, p = k.load("s", src), k.load("p", pred)
        dst = k.result("dst", src.shape, "float32", init=old)
        k.emit(Opcode.TENSOR_COPY_PREDICATED, dst, [s, p], reverse_pred=reverse)
        return k
    out = _both(make)["dst"]
    take = (pred != 0) != reverse
    assert np.array_equal(_bits(out), np.where(take, _bits(src), _bits(old)))


def test_select_raw_and_casting():
    """select: on_true where predicate != 0 else on_false; bits when dtypes agree, fp32 otherwise."""
    pred = RNG.integers(0, 2, size=(64, 32), dtype=np.int32)
    t_bits = RNG.integers(0, 2**16, size=(64, 32), dtype=np.uint16).view(BF16)
    f_vals = RNG.standard_normal((64, 32)).astype(np.float32)

    def make():
        k = OneOp()
        p, t, f = k.load("p", pred), k.load("t", t_bits), k.load("f", f_vals.astype(BF16))
        f32 = k.load("f32", f_vals)
        k.emit(Opcode.SELECT, k.result("raw", pred.shape, "bfloat16"), [p, t, f])
        k.emit(Opcode.SELECT, k.result("cast", pred.shape, "bfloat16"), [p, t, f32])
        return k
    out = _both(make)
    assert np.array_equal(_bits(out["raw"]), np.where(pred != 0, _bits(t_bits), _bits(f_vals.astype(BF16))))
    t_canon = encode(decode(t_bits, DType.bfloat16), DType.bfloat16)  # the fp32 path canonicalizes NaNs
    expect = np.where(pred != 0, _bits(t_canon), _bits(_round(f_vals, "bfloat16")))
    assert np.array_equal(_bits(out["cast"]), expect)


# ---------------------------------------------------------------- access patterns and aliasing

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
    out = _both(make)
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
    out = _both(make)
    expect = X.copy()
    expect[:, 1:] = X[:, :63] + X[:, :63]
    assert np.array_equal(out["a"], expect)
    assert np.array_equal(out["b"], -Y)


# ---------------------------------------------------------------- fuzz: the executors agree

FLOAT_DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "tfloat32"]
INT_DTYPES = ["int8", "int16", "int32", "uint8", "uint16", "uint32"]
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-45, 3e38, -1.0, 0.5],
                    dtype=np.float32)


def _random(dtype, shape, rng):
    """Data of a storage dtype: normals and specials, plus raw random bits (NaN payloads,
    subnormals, huge values) for floats; the full range plus small values for ints."""
    dt = dtype_of(dtype)
    if dt.is_int:
        info = np.iinfo(dt.numpy)
        wide = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64)
        small = rng.integers(-4, 5, size=shape)
        return np.where(rng.random(shape) < 0.5, wide, np.clip(small, info.min, info.max)).astype(dt.numpy)
    values = (rng.standard_normal(shape) * 4).astype(np.float32)
    values = np.where(rng.random(shape) < 0.2, rng.choice(SPECIALS, size=shape), values).astype(np.float32)
    if dt is DType.tfloat32:
        return values
    with np.errstate(over="ignore"):
        typed = values.astype(dt.numpy)
    raw = rng.integers(0, 2 ** (8 * dt.itemsize), size=shape, dtype=np.uint64).astype(f"u{dt.itemsize}")
    return np.where(rng.random(shape) < 0.15, raw.view(dt.numpy), typed)


shapes = st.sampled_from([(1, 1), (3, 5), (32, 17), (128, 40)])


@st.composite
def elementwise_case(draw):
    opcode = draw(st.sampled_from([Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR,
                                   Opcode.TENSOR_COPY, Opcode.SELECT, Opcode.TENSOR_COPY_PREDICATED,
                                   Opcode.MEMSET]))
    bitvec = opcode in (Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR) and draw(st.booleans())
    pool = INT_DTYPES if bitvec else FLOAT_DTYPES + INT_DTYPES
    dtypes = [draw(st.sampled_from(pool)) for _ in range(4)]
    shape = draw(shapes)
    arith = [op for op in AluOp if op not in vector.UNARY_ALU_OPS and op not in BITVEC_ALU_OPS]
    bit_ops = [AluOp.bitwise_and, AluOp.bitwise_or, AluOp.bitwise_xor, AluOp.left_shift, AluOp.right_shift]
    ops = bit_ops if bitvec else arith + ([] if opcode is not Opcode.TENSOR_SCALAR else
                                          sorted(vector.UNARY_ALU_OPS - {AluOp.invert}))
    imm = {}
    if opcode is Opcode.TENSOR_TENSOR:
        imm = {"op": draw(st.sampled_from(bit_ops if bitvec else arith))}
    elif opcode is Opcode.TENSOR_SCALAR:
        operands = st.integers(0, 9) if bitvec else st.sampled_from([0.0, -0.0, 2.5, -1e30, 7.0, 1e-3])
        imm = {"op0": draw(st.sampled_from(ops)), "reverse0": draw(st.booleans()),
               "operand0": float(draw(operands))}
        if draw(st.booleans()):
            imm.update(op1=draw(st.sampled_from(ops)), reverse1=draw(st.booleans()),
                       operand1=float(draw(operands)))
    elif opcode is Opcode.SCALAR_TENSOR_TENSOR:
        imm = {"op0": draw(st.sampled_from(arith)), "op1": draw(st.sampled_from(arith)),
               "operand0": draw(st.sampled_from([0.0, 1.5, -2.0])), "reverse0": draw(st.booleans()),
               "reverse1": draw(st.booleans())}
    elif opcode is Opcode.TENSOR_COPY_PREDICATED:
        imm = {"reverse_pred": draw(st.booleans())}
        dtypes[0] = dtypes[1]  # src and dst share a dtype (S16)
        dtypes[2] = draw(st.sampled_from(["uint8", "uint16", "uint32"]))
    elif opcode is Opcode.SELECT:
        dtypes[1] = draw(st.sampled_from(INT_DTYPES))
    elif opcode is Opcode.MEMSET:
        imm = {"value": draw(st.one_of(st.integers(-2**40, 2**40), st.sampled_from(list(SPECIALS.tolist())),
                                       st.floats(-1e6, 1e6, width=32)))}
    engines = {Opcode.TENSOR_TENSOR: [Engine.VECTOR, Engine.GPSIMD],
               Opcode.TENSOR_COPY: [Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD],
               Opcode.MEMSET: [Engine.VECTOR, Engine.GPSIMD]}.get(opcode, [Engine.VECTOR])
    imm["engine"] = draw(st.sampled_from(engines))
    if imm["engine"] is Engine.GPSIMD and opcode is Opcode.TENSOR_TENSOR and draw(st.booleans()):
        dtypes[:3] = [draw(st.sampled_from(["int32", "uint32"])) for _ in range(3)]  # native integers
        imm["op"] = draw(st.sampled_from(sorted(vector.NATIVE_INT_ALU_OPS)))
    tile = opcode is Opcode.TENSOR_SCALAR and draw(st.booleans())
    strided = draw(st.booleans())
    psum = imm["engine"] is not Engine.GPSIMD and opcode is not Opcode.MEMSET and draw(st.booleans())
    return opcode, dtypes, shape, imm, tile, strided, psum, draw(st.integers(0, 2**32 - 1))


@FUZZ
@given(elementwise_case())
def test_fuzz_reference_and_numba_agree(case):
    """Random instructions of this file on random data (NaN, inf, -0, subnormals, raw bits): the
    two executors write the same bits."""
    opcode, dtypes, (p, f), imm, tile, strided, psum, seed = case
    rng = np.random.default_rng(seed)
    dst_dtype = dtypes[0]

    def make():
        k = OneOp()
        width = 2 * f if strided else f

        def src(i, dtype):
            memory = Memory.PSUM if psum and i == 0 else Memory.SBUF
            t = k.load(f"s{i}", _random(dtype, (p, width), rng), memory)
            return t.ap([[width, p], [2, f]]) if strided else t.ap()
        n_src = {Opcode.TENSOR_TENSOR: 2, Opcode.TENSOR_SCALAR: 1, Opcode.SCALAR_TENSOR_TENSOR: 2,
                 Opcode.TENSOR_COPY: 1, Opcode.SELECT: 3, Opcode.TENSOR_COPY_PREDICATED: 2,
                 Opcode.MEMSET: 0}[opcode]
        srcs = [src(i, dtypes[i + 1]) for i in range(n_src)]
        kw = dict(imm)
        if tile:
            col = k.load("col", _random(dtypes[1] if dtypes[1] in INT_DTYPES else "float32", (p, 1), rng))
            srcs.append(col)
            kw["operand0_is_tile"] = True
            kw.pop("operand0")
        init = _random(dst_dtype, (p, f), rng) if opcode is Opcode.TENSOR_COPY_PREDICATED else None
        dst = k.result("dst", (p, f), dst_dtype, init=init)
        k.emit(opcode, dst, srcs, **kw)
        return k
    rng_state = rng.bit_generator.state
    results = []
    for executor in EXECUTORS:
        rng.bit_generator.state = rng_state
        try:
            results.append(make().run(executor)["dst"])
        except NeuronSimError:
            return  # a combination the checks reject (e.g. a tile dtype); the checks have their own tests
    assert np.array_equal(_bits(results[0]), _bits(results[1]))


# ---------------------------------------------------------------- costs (engine cycles from the timeline)

def _cycles(build, chip=TRN2):
    """Engine cycles of the last instruction of the Program ``build(b)`` makes."""
    b = ProgramBuilder("cost")
    build(b)
    program = b.build()
    prep = sim.prepare(program, chip)
    ins = program.instructions[-1]
    ns = prep.timeline.end_ns[-1] - prep.timeline.start_ns[-1]
    return ns * chip.clock_hz(ins.engine.clock_name) / 1e9


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
    assert _cycles(_tt(512)) == pytest.approx(1024)
    assert _cycles(_tt(512, mems=(Memory.PSUM, Memory.SBUF))) == pytest.approx(512)
    assert _cycles(_tt(512, dtypes=("bfloat16",) * 3)) == pytest.approx(512 / other)
    assert _cycles(_tt(512, dtypes=("bfloat16",) * 3, op=AluOp.maximum)) == pytest.approx(1024 / other)
    assert _cycles(_tt(512, dtypes=("float16",) * 3)) == pytest.approx(1024 / other)
    assert _cycles(_tt(512, dtypes=("bfloat16", "bfloat16", "float32"))) == pytest.approx(1024)
    assert _cycles(_tt(16)) == pytest.approx(MIN_II)
    assert _cycles(_tt(512, engine=Engine.GPSIMD)) == pytest.approx(1024)
    assert _cycles(_tt(512, step=4)) == pytest.approx(1024)  # 16-byte stride: no penalty
    assert _cycles(_tt(512, step=8)) == pytest.approx(2048 * TRN2.access_stride_penalty_factor / 2)


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
    assert _cycles(_ts(1024)) == pytest.approx(1024)
    assert _cycles(_ts(1024, "bfloat16")) == pytest.approx(1024 / sbuf16)
    assert _cycles(_ts(1024, "float16", step=2)) == pytest.approx(1024 / other)
    assert _cycles(_ts(1024, "bfloat16", dst_mem=Memory.PSUM)) == pytest.approx(1024 / other)
    assert _cycles(_ts(1024, "bfloat16", dst_dtype="float32")) == pytest.approx(1024)
    assert _cycles(_ts(1024, chip_ops=(AluOp.reciprocal, None))) == pytest.approx(8 * 1024)
    assert _cycles(_ts(128, "bfloat16")) == pytest.approx(MIN_II)
    assert _cycles(_ts(1024, "bfloat16", engine=Engine.SCALAR)) == pytest.approx(1024)
    assert _cycles(_ts(1024, "bfloat16", engine=Engine.SCALAR), TRN3) == pytest.approx(512)
    assert _cycles(_ts(1024, engine=Engine.GPSIMD, chip_ops=(AluOp.rsqrt, None))) == pytest.approx(4 * 1024)
    assert _cycles(_ts(1024, step=5)) == pytest.approx(2 * 1024)  # 20-byte stride


def test_scalar_tensor_tensor_costs():
    """S23: N if bf16 (data, operand1, dst), subtract -> multiply and N even; else 2N; MIN_II floor."""
    def build(n, dtype, op0=AluOp.subtract, op1=AluOp.multiply):
        def f(b):
            a, o, d = (b.sbuf(x, (128, n), dtype) for x in "aod")
            b.emit(Opcode.SCALAR_TENSOR_TENSOR, d, [a, o], op0=op0, operand0=1.0, op1=op1)
        return f
    assert _cycles(build(512, "bfloat16")) == pytest.approx(512)
    assert _cycles(build(511, "bfloat16")) == pytest.approx(1022)
    assert _cycles(build(512, "bfloat16", op1=AluOp.add)) == pytest.approx(1024)
    assert _cycles(build(512, "float32")) == pytest.approx(1024)
    assert _cycles(build(8, "bfloat16")) == pytest.approx(MIN_II)


def test_copy_memset_predicated_select_costs():
    """tensor_copy as tensor_scalar (VectorE perf mode; ScalarE; GpSimd N); memset N/2 for zero
    into bf16/fp16 else N; tensor_copy_predicated N with one operand in PSUM else 2N; select 2N."""
    def copy(n, dtype, engine):
        return lambda b: b.emit(Opcode.TENSOR_COPY, b.sbuf("d", (128, n), dtype),
                                [b.sbuf("s", (128, n), dtype)], engine=engine)
    assert _cycles(copy(2048, "bfloat16", Engine.VECTOR)) == pytest.approx(512)
    assert _cycles(copy(2048, "float32", Engine.VECTOR)) == pytest.approx(2048)
    assert _cycles(copy(2048, "bfloat16", Engine.SCALAR), TRN3) == pytest.approx(1024)
    assert _cycles(copy(2048, "bfloat16", Engine.GPSIMD)) == pytest.approx(2048)

    def memset(n, dtype, value, engine=Engine.VECTOR):
        return lambda b: b.emit(Opcode.MEMSET, b.sbuf("d", (128, n), dtype), value=value, engine=engine)
    assert _cycles(memset(1024, "bfloat16", 0.0)) == pytest.approx(512)
    assert _cycles(memset(1024, "bfloat16", -0.0)) == pytest.approx(1024)
    assert _cycles(memset(1024, "float32", 0.0)) == pytest.approx(1024)
    assert _cycles(memset(1024, "bfloat16", 0.0, Engine.GPSIMD)) == pytest.approx(1024)

    def predicated(n, src_mem):
        def f(b):
            s = b.tensor("s", src_mem, (128, n), "float32")
            p = b.sbuf("p", (128, n), "uint8")
            b.emit(Opcode.TENSOR_COPY_PREDICATED, b.sbuf("d", (128, n), "float32"), [s, p])
        return f
    assert _cycles(predicated(1024, Memory.PSUM)) == pytest.approx(1024)
    assert _cycles(predicated(1024, Memory.SBUF)) == pytest.approx(2048)

    def select(b):
        p = b.sbuf("p", (128, 300), "uint8")
        t, f = b.sbuf("t", (128, 300), "float32"), b.sbuf("f", (128, 300), "float32")
        b.emit(Opcode.SELECT, b.sbuf("d", (128, 300), "float32"), [p, t, f])
    assert _cycles(select) == pytest.approx(600)


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

def _rejects(build, cls, match, chip="trn2"):
    b = ProgramBuilder("bad")
    build(b)
    with pytest.raises(cls, match=match) as info:
        sim.prepare(b.build(), chip)
    assert LOC in str(info.value)
    assert type(info.value) is cls


def _emit(opcode, dst, srcs, **kw):
    return lambda b: b.emit(opcode, dst(b), [s(b) for s in srcs], location=LOC, **kw)


def _t(name, shape=(128, 64), dtype="float32", memory=Memory.SBUF):
    return lambda b: b.tensor(name, memory, shape, dtype)


F = _t("f")


def I32(name):  # reads as a dtype in the table below
    return _t(name, dtype="int32")


CHECKS = [
    # operand counts and shapes
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a")], op=AluOp.add), ConstraintError, "takes 2 source"),
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a"), _t("c", (128, 32))], op=AluOp.add), ConstraintError,
     "data1 is 128x64"),
    (_emit(Opcode.TENSOR_TENSOR, _t("d", (64, 64)), [_t("a"), _t("c")], op=AluOp.add), ConstraintError,
     "dst is 64x64"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a"), _t("c", (128, 1))], op0=AluOp.add, operand0=1.0),
     ConstraintError, "takes 1 source"),
    (_emit(Opcode.SELECT, F, [_t("p", dtype="uint8"), _t("a")]), ConstraintError, "takes 3 source"),
    (_emit(Opcode.MEMSET, F, [_t("a")], value=1.0), ConstraintError, "takes 0 source"),
    # immediates
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a"), _t("c")]), ConstraintError, "needs the immediate 'op'"),
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a"), _t("c")], op=99), ConstraintError, "not an ALU operator"),
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a"), _t("c")], op=AluOp.add, opp=1), ConstraintError,
     "unknown immediate"),
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a"), _t("c")], op=AluOp.abs), ConstraintError, "unary"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.add), ConstraintError, "operand0=None"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.add, operand0="x"), ConstraintError,
     "must be a number"),
    (_emit(Opcode.MEMSET, F, [], value="zero"), ConstraintError, "must be a number"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.add, operand0=1.0, operand1_is_tile=True),
     ConstraintError, "op1 is None"),
    # memories
    (_emit(Opcode.TENSOR_TENSOR, F, [_t("a", memory=Memory.PSUM), _t("c", memory=Memory.PSUM)], op=AluOp.add),
     ConstraintError, "cannot both be in PSUM"),
    (_emit(Opcode.SCALAR_TENSOR_TENSOR, F, [_t("a", memory=Memory.PSUM), _t("c", memory=Memory.PSUM)],
           op0=AluOp.add, operand0=1.0, op1=AluOp.add), ConstraintError, "cannot both be in PSUM"),
    (_emit(Opcode.TENSOR_COPY_PREDICATED, F, [_t("a", memory=Memory.PSUM),
                                              _t("p", dtype="uint8", memory=Memory.PSUM)]),
     ConstraintError, "cannot both be in PSUM"),
    (_emit(Opcode.SELECT, F, [_t("p", dtype="uint8", memory=Memory.PSUM), _t("a", memory=Memory.PSUM),
                              _t("c")]), ConstraintError, "at most one input"),
    # dtypes
    (_emit(Opcode.TENSOR_TENSOR, _t("d", dtype="int32"), [_t("a"), _t("c", dtype="int32")],
           op=AluOp.bitwise_and), DtypeError, "data1 is float32"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a", dtype="int32")], op0=AluOp.left_shift, operand0=1), DtypeError,
     "dst is float32"),
    (_emit(Opcode.TENSOR_SCALAR, I32("d"), [I32("a"), _t("s", (128, 1), "float32")], op0=AluOp.right_shift,
           operand0_is_tile=True), DtypeError, "integer tile"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a"), _t("s", (128, 1), "bfloat16")], op0=AluOp.add,
           operand0_is_tile=True), DtypeError, "float32 or the data's dtype"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a"), _t("s", (128, 2))], op0=AluOp.add, operand0_is_tile=True),
     ConstraintError, r"must be \[128, 1\]"),
    (_emit(Opcode.TENSOR_SCALAR, _t("d", dtype="int32"), [_t("a", dtype="int32")], op0=AluOp.left_shift,
           operand0=1.5), ConstraintError, "whole number"),
    (_emit(Opcode.TENSOR_SCALAR, _t("d", dtype="int32"), [_t("a", dtype="int32")], op0=AluOp.left_shift,
           operand0=1, op1=AluOp.add, operand1=1.0), ConstraintError, "mixes bit and arithmetic"),
    (_emit(Opcode.SCALAR_TENSOR_TENSOR, I32("d"), [I32("a"), I32("c")], op0=AluOp.bitwise_or, operand0=1,
           op1=AluOp.add), ConstraintError, "bitvec operators are not supported"),
    (_emit(Opcode.TENSOR_COPY_PREDICATED, F, [_t("a"), _t("p", dtype="float32")]), DtypeError,
     "predicate is float32"),
    (_emit(Opcode.TENSOR_COPY_PREDICATED, F, [_t("a", dtype="bfloat16"), _t("p", dtype="uint8")]),
     DtypeError, "one dtype on both"),
    (_emit(Opcode.SELECT, F, [_t("p", dtype="bfloat16"), _t("a"), _t("c")]), DtypeError,
     "predicate is bfloat16"),
    # engine rules
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.subtract, operand0=1.0, engine=Engine.SCALAR),
     ConstraintError, "scalar engine runs"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.multiply, operand0=1.0, engine=Engine.GPSIMD),
     ConstraintError, "only allowed for rsqrt"),
    (_emit(Opcode.TENSOR_SCALAR, F, [_t("a")], op0=AluOp.rsqrt, op1=AluOp.multiply, operand1=2.0,
           engine=Engine.GPSIMD), ConstraintError, "only allowed for rsqrt"),
    (_emit(Opcode.TENSOR_SCALAR, _t("d", dtype="int32"), [_t("a", dtype="int32")], op0=AluOp.bitwise_and,
           operand0=1, engine=Engine.SCALAR), ConstraintError, "vector engine only"),
    # free-size limits (S9)
    (_emit(Opcode.TENSOR_COPY, _t("d", (128, 65537), "uint8"), [_t("a", (128, 65537), "uint8")]),
     ConstraintError, "limit is 65536 .vector_free_max_sbuf"),
    (_emit(Opcode.TENSOR_COPY, _t("d", (128, 4097), "bfloat16"),
           [_t("a", (128, 4097), "bfloat16", Memory.PSUM)]),
     ConstraintError, "limit is 4096 .vector_free_max_psum"),
]


@pytest.mark.parametrize("build,cls,match", CHECKS)
def test_checks_raise_typed_located_errors(build, cls, match):
    """Every rule of this file raises its error class, naming the kernel line."""
    _rejects(build, cls, match)


def test_scalar_engine_takes_any_tensor_scalar_on_trn3():
    """The mul+add / mul / add restriction is trn2's (gen3, S16)."""
    b = ProgramBuilder()
    b.emit(Opcode.TENSOR_SCALAR, b.sbuf("d", (128, 8), "float32"), [b.sbuf("a", (128, 8), "float32")],
           op0=AluOp.subtract, operand0=1.0, engine=Engine.SCALAR, location=LOC)
    sim.prepare(b.build(), "trn3")
    for ops in vector.SCALAR_ENGINE_GEN3_OPS:
        b = ProgramBuilder()
        imm = {"op0": ops[0], "operand0": 1.0} | ({"op1": ops[1], "operand1": 2.0} if ops[1] else {})
        b.emit(Opcode.TENSOR_SCALAR, b.sbuf("d", (128, 8), "float32"), [b.sbuf("a", (128, 8), "float32")],
               engine=Engine.SCALAR, **imm)
        sim.prepare(b.build(), "trn2")


def test_power_and_int32_run_on_vector_too():
    """'power and int32/uint32 default to GpSimd' (S16) is a default, not a rule."""
    b = ProgramBuilder()
    b.emit(Opcode.TENSOR_TENSOR, b.sbuf("d", (128, 8), "int32"),
           [b.sbuf("a", (128, 8), "int32"), b.sbuf("c", (128, 8), "int32")], op=AluOp.power)
    assert sim.prepare(b.build()).program.instructions[0].engine is Engine.VECTOR


def test_every_opcode_of_this_file_is_registered():
    for op in (Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR, Opcode.TENSOR_COPY,
               Opcode.MEMSET, Opcode.TENSOR_COPY_PREDICATED, Opcode.SELECT):
        assert OPDEFS[op] in vector.OPS
    assert math.isclose(TRN2.vector_engine_clock_hz, 0.96e9)
