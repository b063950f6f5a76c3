"""VectorE's PRNG (sim/engines/vector_rng.py): rng and dropout — the two executors bit for bit, the
stream's documented properties (same seed same values, successive positions fresh values), its
uniformity, dropout's keep/drop rule, the S23 cost ``max(MIN_II, N)`` and every check."""

import ml_dtypes
import numpy as np
import pytest
from elementwise_cases import emit, rejects, tile  # the checks' program builders

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, EngineAccessError
from neuronsim.sim import Engine, Memory, Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import dtype_of
from neuronsim.sim.engines.vector_rng import stream_bits, uniform_of

EXECUTORS = ["numba", "reference"]
LOC = "my_kernel.py:7"
TRN2 = get_chip("trn2")
MIN_II = TRN2.min_ii_cycles


def _bits(a):
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


class RngProgram:
    """A Program that DMAs a seed (and inputs) on chip, runs PRNG instructions, DMAs results out."""

    def __init__(self, seed, seed_dtype="uint32"):
        self.b = ProgramBuilder("rng")
        np_dtype = dtype_of(seed_dtype).numpy
        self.inputs = {"seed_in": np.array([[seed]], np.uint32).view(np_dtype)}
        h = self.b.hbm("seed_in", (1, 1), seed_dtype)
        self.seed = self.b.sbuf("seed", (1, 1), seed_dtype)
        self.b.emit(Opcode.DMA_COPY, self.seed, [h])
        self.outs = []

    def load(self, name, array):
        dtype = dtype_of(array.dtype)
        h = self.b.hbm(name + "_in", array.shape, dtype)
        t = self.b.sbuf(name, array.shape, dtype)
        self.b.emit(Opcode.DMA_COPY, t, [h])
        self.inputs[h.name] = array
        return t

    def result(self, name, shape, dtype):
        t = self.b.sbuf(name, shape, dtype)
        self.outs.append(t)
        return t

    def emit(self, opcode, dst, srcs, **kw):
        return self.b.emit(opcode, dst, srcs, location=LOC, **kw)

    def run(self, executor):
        for t in self.outs:
            self.b.emit(Opcode.DMA_COPY, self.b.hbm(t.name + "_out", t.shape, t.dtype, kind="output"), [t])
        out = sim.run(self.b.build(), self.inputs, "trn2", executor=executor).outputs
        return {t.name: out[t.name + "_out"] for t in self.outs}


def _both(make):
    results = [make().run(e) for e in EXECUTORS]
    for name in results[0]:
        assert np.array_equal(_bits(results[0][name]), _bits(results[1][name])), name
    return results[0]


def _rng(seed, shape=(128, 64), dtype="uint32", offset=0, engine=Engine.VECTOR, seed_dtype="uint32"):
    def make():
        k = RngProgram(seed, seed_dtype)
        k.emit(Opcode.RNG, k.result("r", shape, dtype), [k.seed], offset=offset, engine=engine)
        return k
    return _both(make)["r"]


# ---------------------------------------------------------------- rng values

@pytest.mark.parametrize("dtype", ["uint32", "int32", "uint16", "int16", "uint8", "int8"])
@pytest.mark.parametrize("engine", [Engine.VECTOR, Engine.GPSIMD], ids=lambda e: e.name.lower())
def test_rng_writes_the_low_bits_of_the_stream(dtype, engine):
    """Element (p, j) of a [P, N] tile is stream element offset + p*N + j, truncated to dst's width."""
    out = _rng(0xDEADBEEF, (33, 50), dtype, offset=1000, engine=engine)
    expect = stream_bits(0xDEADBEEF, 1000, 33 * 50).reshape(33, 50).astype(dtype_of(dtype).numpy)
    assert np.array_equal(_bits(out), _bits(expect))


def test_rng_same_seed_same_values_and_positions_continue_the_stream():
    """One seed is one sequence (S16): two rng calls at offsets 0 and N equal one call of 2N."""
    a = _rng(7, (128, 64))
    assert np.array_equal(a, _rng(7, (128, 64)))
    first, second = _rng(7, (128, 32)), _rng(7, (128, 32), offset=128 * 32)
    assert np.array_equal(np.concatenate([first.reshape(-1), second.reshape(-1)]), a.reshape(-1))
    assert not np.array_equal(first, second)


def test_rng_different_seeds_differ_and_any_32bit_seed_dtype_gives_its_bits():
    a, b = _rng(1, (64, 64)), _rng(2, (64, 64))
    assert np.mean(a == b) < 0.01
    as_float = _rng(0x3F800000, (16, 16), seed_dtype="float32")  # the bits of 1.0f
    assert np.array_equal(as_float, _rng(0x3F800000, (16, 16)))


def test_rng_offset_wraps_at_two_to_the_32():
    out = _rng(5, (1, 8), offset=2**32 - 4)
    expect = np.concatenate([stream_bits(5, 2**32 - 4, 4), stream_bits(5, 0, 4)])
    assert np.array_equal(out.reshape(-1), expect)


@pytest.mark.parametrize("dtype", ["uint32", "int8"])
def test_rng_strided_destination_follows_its_access_pattern(dtype):
    """Strided and reversed free steps (the narrow dtype truncates there too: a fuzz regression)."""
    def make():
        k = RngProgram(99)
        d = k.result("r", (64, 40), dtype)
        k.emit(Opcode.RNG, d.ap([[40, 64], [-2, 20]], offset=39), [k.seed], offset=3)
        return k
    out = _both(make)["r"]
    expect = stream_bits(99, 3, 64 * 20).reshape(64, 20).astype(dtype_of(dtype).numpy)
    assert np.array_equal(out[:, 1::2][:, ::-1], expect)


def test_stream_is_uniform():
    """64k draws: mean of the [0, 1) floats within 0.01 of 0.5, every 1/16 bucket near 1/16, every bit
    set about half the time, and neighbours uncorrelated."""
    bits = _rng(2024, (128, 512))
    u = uniform_of(bits.reshape(-1))
    assert abs(u.mean() - 0.5) < 0.01
    assert 0.0 <= u.min() and u.max() < 1.0
    counts = np.bincount((u * 16).astype(int), minlength=16) / u.size
    assert np.all(np.abs(counts - 1 / 16) < 0.004)
    per_bit = ((bits.reshape(-1, 1) >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.all(np.abs(per_bit - 0.5) < 0.01)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02


# ---------------------------------------------------------------- dropout

X = np.random.default_rng(3).standard_normal((128, 256)).astype(np.float32)
X[0, :4] = [np.nan, -0.0, np.inf, -np.inf]


def _dropout(x, prob, seed=11, offset=0, prob_tile=None):
    def make():
        k = RngProgram(seed)
        data = k.load("x", x)
        srcs, imm = [data, k.seed], {"prob": prob, "prob_is_tile": False}
        if prob_tile is not None:
            srcs.append(k.load("prob", prob_tile))
            imm = {"prob_is_tile": True}
        k.emit(Opcode.DROPOUT, k.result("y", x.shape, dtype_of(x.dtype)), srcs, offset=offset, **imm)
        return k
    return _both(make)["y"]


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32, np.uint8])
def test_dropout_keeps_bits_where_uniform_is_at_least_prob(dtype):
    is_int = np.dtype(dtype).kind in "iu"
    x = np.nan_to_num(X * 50, posinf=7, neginf=-7).astype(dtype) if is_int else X.astype(dtype)
    y = _dropout(x, 0.3, offset=17)
    drop = uniform_of(stream_bits(11, 17, x.size)).reshape(x.shape) < np.float32(0.3)
    assert np.array_equal(_bits(y), np.where(drop, 0, _bits(x)))
    assert abs(drop.mean() - 0.3) < 0.01


def test_dropout_prob_zero_keeps_all_prob_one_drops_all_and_a_tile_is_per_partition():
    assert np.array_equal(_bits(_dropout(X, 0.0)), _bits(X))
    assert not np.any(_bits(_dropout(X, 1.0)))
    probs = np.linspace(0, 1, 128, dtype=np.float32).reshape(128, 1)
    y = _dropout(X, None, prob_tile=probs)
    drop = uniform_of(stream_bits(11, 0, X.size)).reshape(X.shape) < probs
    assert np.array_equal(_bits(y), np.where(drop, 0, _bits(X)))
    assert np.all(_bits(y[-1]) == 0) and np.array_equal(_bits(y[0]), _bits(X[0]))


def test_dropout_and_rng_draw_the_same_stream():
    """dropout's uniforms are rng's bits: one seed gives one sequence, whichever instruction draws it."""
    def make():
        k = RngProgram(4)
        k.emit(Opcode.RNG, k.result("r", (128, 256), "uint32"), [k.seed], offset=5)
        k.emit(Opcode.DROPOUT, k.result("y", X.shape, "float32"), [k.load("x", X), k.seed], offset=5,
               prob=0.5)
        return k
    out = _both(make)
    assert np.array_equal(out["y"] == 0, (uniform_of(out["r"]) < 0.5) | (X == 0))


# ---------------------------------------------------------------- costs

def _cycles(build):
    b = ProgramBuilder("cost")
    build(b)
    program = b.build()
    prep = sim.prepare(program, TRN2)
    ins = program.instructions[-1]
    ns = prep.timeline.end_ns[-1] - prep.timeline.start_ns[-1]
    return ns * TRN2.clock_hz(ins.engine.clock_name) / 1e9


def test_costs_are_n_cycles():
    """S23: dropout ``max(MIN_II, N)``; rng charged the same, on VectorE and GpSimd."""
    def rng(n, engine=Engine.VECTOR, dtype="uint32"):
        return lambda b: b.emit(Opcode.RNG, b.sbuf("d", (128, n), dtype), [b.sbuf("s", (1, 1), "uint32")],
                                engine=engine, offset=0)

    def dropout(n, dtype="float32"):
        return lambda b: b.emit(Opcode.DROPOUT, b.sbuf("d", (128, n), dtype),
                                [b.sbuf("x", (128, n), dtype), b.sbuf("s", (1, 1), "uint32")], offset=0,
                                prob=0.1)
    assert _cycles(rng(2048)) == pytest.approx(2048)
    assert _cycles(rng(2048, dtype="uint16")) == pytest.approx(2048)
    assert _cycles(rng(1024, Engine.GPSIMD)) == pytest.approx(1024)
    assert _cycles(rng(8)) == pytest.approx(MIN_II)
    assert _cycles(dropout(1024)) == pytest.approx(1024)
    assert _cycles(dropout(1024, "bfloat16")) == pytest.approx(1024)


# ---------------------------------------------------------------- checks

SEED = tile("seed", (1, 1), "uint32")
ONE_BY_ONE = r"must be \[1, 1\]"


@pytest.mark.parametrize("build,cls,match", [
    (emit(Opcode.RNG, tile("d", dtype="float32"), [SEED]), DtypeError, "rng writes an integer dtype"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [tile("s", (1, 2), "uint32")]), ConstraintError, ONE_BY_ONE),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [tile("s", (2, 1), "uint32")]), ConstraintError, ONE_BY_ONE),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [tile("s", (1, 1), "bfloat16")]), DtypeError,
     "32-bit value"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [tile("s", (1, 1), "uint8")]), DtypeError, "32-bit value"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [SEED], offset=2**32), ConstraintError, "stream position"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [SEED], offset=-1), ConstraintError, "stream position"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [SEED], offset=1.5), ConstraintError, "stream position"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), [SEED], seed=3), ConstraintError, "unknown immediate"),
    (emit(Opcode.RNG, tile("d", dtype="uint32"), []), ConstraintError, "source operand"),
    (emit(Opcode.RNG, tile("d", dtype="uint32", memory=Memory.PSUM), [SEED], engine=Engine.GPSIMD),
     EngineAccessError, "PSUM"),
    (emit(Opcode.DROPOUT, tile("d", dtype="bfloat16"), [tile("x"), SEED], prob=0.5), DtypeError,
     "must match"),
    (emit(Opcode.DROPOUT, tile("d", (128, 32)), [tile("x"), SEED], prob=0.5), ConstraintError,
     "dst is 128x32"),
    (emit(Opcode.DROPOUT, tile("d"), [tile("x"), tile("s", (1, 1), "int16")], prob=0.5), DtypeError,
     "32-bit"),
    (emit(Opcode.DROPOUT, tile("d"), [tile("x"), SEED]), ConstraintError, "prob=None must be a number"),
    (emit(Opcode.DROPOUT, tile("d"), [tile("x"), SEED], prob=True), ConstraintError, "must be a number"),
    (emit(Opcode.DROPOUT, tile("d"), [tile("x"), SEED, tile("p", (64, 1))], prob_is_tile=True),
     ConstraintError, r"must be \[128, 1\]"),
    (emit(Opcode.DROPOUT, tile("d", dtype="int32"),
           [tile("x", dtype="int32"), SEED, tile("p", (128, 1), "bfloat16")], prob_is_tile=True),
     DtypeError, "float32"),
    (emit(Opcode.DROPOUT, tile("d"), [tile("x"), SEED], prob=0.5, prob_is_tile=True), ConstraintError,
     "source operand"),
])
def test_checks(build, cls, match):
    rejects(build, cls, match)
