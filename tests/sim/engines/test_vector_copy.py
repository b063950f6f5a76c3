"""tensor_copy, memset, tensor_copy_predicated and select (sim/engines/vector_copy.py): values
against numpy (bit-exact moves and casts, exact integer fills, kept bits, raw and casting selects),
the two executors bit for bit on random data, the documented costs (S23 §2.8, v3 perf modes §2.3)
and every check."""

import ml_dtypes
import numpy as np
import pytest
from elementwise_cases import (
    BF16,
    FUZZ,
    TRN3,
    F,
    OneOp,
    X,
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

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Engine, Memory, Opcode
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines import OPDEFS, vector_copy
from neuronsim.sim.memory.numerics import decode, encode

RNG = np.random.default_rng(4323)


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
    out = both_executors(make)
    assert np.array_equal(bits_of(out["f_out"]), bits)
    assert np.array_equal(out["i_out"], big)
    assert np.array_equal(bits_of(out["bf"]), bits_of(round_to(X[:64, :32], "bfloat16")))
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
    out = both_executors(make)
    for i, (dtype, _, expect) in enumerate(cases):
        assert np.array_equal(bits_of(out[f"m{i}"]), bits_of(np.full((32, 8), expect))), dtype


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
    out = both_executors(make)["dst"]
    take = (pred != 0) != reverse
    assert np.array_equal(bits_of(out), np.where(take, bits_of(src), bits_of(old)))


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
    out = both_executors(make)
    raw = np.where(pred != 0, bits_of(t_bits), bits_of(f_vals.astype(BF16)))
    assert np.array_equal(bits_of(out["raw"]), raw)
    t_canon = encode(decode(t_bits, DType.bfloat16), DType.bfloat16)  # the fp32 path canonicalizes NaNs
    expect = np.where(pred != 0, bits_of(t_canon), bits_of(round_to(f_vals, "bfloat16")))
    assert np.array_equal(bits_of(out["cast"]), expect)


# ---------------------------------------------------------------- fuzz: the executors agree

@settings(FUZZ, max_examples=120)
@given(elementwise_case([Opcode.TENSOR_COPY, Opcode.MEMSET, Opcode.TENSOR_COPY_PREDICATED, Opcode.SELECT]))
def test_fuzz_reference_and_numba_agree(case):
    """Random copies, fills, predicated copies and selects on random data (NaN, inf, -0,
    subnormals, raw bits): the two executors write the same bits."""
    assert_executors_agree(case)


# ---------------------------------------------------------------- costs (engine cycles from the timeline)

def test_copy_memset_predicated_select_costs():
    """tensor_copy as tensor_scalar (VectorE perf mode; ScalarE; GpSimd N); memset N/2 for zero
    into bf16/fp16 else N; tensor_copy_predicated N with one operand in PSUM else 2N; select 2N."""
    def copy(n, dtype, engine):
        return lambda b: b.emit(Opcode.TENSOR_COPY, b.sbuf("d", (128, n), dtype),
                                [b.sbuf("s", (128, n), dtype)], engine=engine)
    assert engine_cycles(copy(2048, "bfloat16", Engine.VECTOR)) == pytest.approx(512)
    assert engine_cycles(copy(2048, "float32", Engine.VECTOR)) == pytest.approx(2048)
    assert engine_cycles(copy(2048, "bfloat16", Engine.SCALAR), TRN3) == pytest.approx(1024)
    assert engine_cycles(copy(2048, "bfloat16", Engine.GPSIMD)) == pytest.approx(2048)

    def memset(n, dtype, value, engine=Engine.VECTOR):
        return lambda b: b.emit(Opcode.MEMSET, b.sbuf("d", (128, n), dtype), value=value, engine=engine)
    assert engine_cycles(memset(1024, "bfloat16", 0.0)) == pytest.approx(512)
    assert engine_cycles(memset(1024, "bfloat16", -0.0)) == pytest.approx(1024)
    assert engine_cycles(memset(1024, "float32", 0.0)) == pytest.approx(1024)
    assert engine_cycles(memset(1024, "bfloat16", 0.0, Engine.GPSIMD)) == pytest.approx(1024)

    def predicated(n, src_mem):
        def f(b):
            s = b.tensor("s", src_mem, (128, n), "float32")
            p = b.sbuf("p", (128, n), "uint8")
            b.emit(Opcode.TENSOR_COPY_PREDICATED, b.sbuf("d", (128, n), "float32"), [s, p])
        return f
    assert engine_cycles(predicated(1024, Memory.PSUM)) == pytest.approx(1024)
    assert engine_cycles(predicated(1024, Memory.SBUF)) == pytest.approx(2048)

    def select(b):
        p = b.sbuf("p", (128, 300), "uint8")
        t, f = b.sbuf("t", (128, 300), "float32"), b.sbuf("f", (128, 300), "float32")
        b.emit(Opcode.SELECT, b.sbuf("d", (128, 300), "float32"), [p, t, f])
    assert engine_cycles(select) == pytest.approx(600)


# ---------------------------------------------------------------- checks

CHECKS = [
    (emit(Opcode.SELECT, F, [tile("p", dtype="uint8"), tile("a")]), ConstraintError, "takes 3 source"),
    (emit(Opcode.MEMSET, F, [tile("a")], value=1.0), ConstraintError, "takes 0 source"),
    (emit(Opcode.MEMSET, F, [], value="zero"), ConstraintError, "must be a number"),
    (emit(Opcode.TENSOR_COPY_PREDICATED, F, [tile("a", memory=Memory.PSUM),
                                              tile("p", dtype="uint8", memory=Memory.PSUM)]),
     ConstraintError, "cannot both be in PSUM"),
    (emit(Opcode.SELECT, F, [tile("p", dtype="uint8", memory=Memory.PSUM), tile("a", memory=Memory.PSUM),
                              tile("c")]), ConstraintError, "at most one input"),
    (emit(Opcode.TENSOR_COPY_PREDICATED, F, [tile("a"), tile("p", dtype="float32")]), DtypeError,
     "predicate is float32"),
    (emit(Opcode.TENSOR_COPY_PREDICATED, F, [tile("a", dtype="bfloat16"), tile("p", dtype="uint8")]),
     DtypeError, "one dtype on both"),
    (emit(Opcode.SELECT, F, [tile("p", dtype="bfloat16"), tile("a"), tile("c")]), DtypeError,
     "predicate is bfloat16"),
    (emit(Opcode.TENSOR_COPY, tile("d", (128, 65537), "uint8"), [tile("a", (128, 65537), "uint8")]),
     ConstraintError, "limit is 65536 .vector_free_max_sbuf"),
    (emit(Opcode.TENSOR_COPY, tile("d", (128, 4097), "bfloat16"),
           [tile("a", (128, 4097), "bfloat16", Memory.PSUM)]),
     ConstraintError, "limit is 4096 .vector_free_max_psum"),
]


@pytest.mark.parametrize("build,cls,match", CHECKS)
def test_checks_raise_typed_located_errors(build, cls, match):
    """Every rule of this file raises its error class, naming the kernel line."""
    rejects(build, cls, match)


def test_every_opcode_of_this_file_is_registered():
    for op in (Opcode.TENSOR_COPY, Opcode.MEMSET, Opcode.TENSOR_COPY_PREDICATED, Opcode.SELECT):
        assert OPDEFS[op] in vector_copy.OPS
