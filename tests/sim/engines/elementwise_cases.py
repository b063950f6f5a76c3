"""Shared by the tests of the elementwise families (test_vector_tensor_tensor.py,
test_vector_tensor_scalar.py, test_vector_copy.py): a one-instruction Program on both executors,
random data of every storage dtype, the fuzz case strategy, engine cycles from the timeline, and the
check-table builders."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from neuronsim import sim
from neuronsim.errors import NeuronSimError
from neuronsim.sim import AluOp, Engine, Memory, Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType, dtype_of
from neuronsim.sim.engines.alu import NATIVE_INT_ALU_OPS
from neuronsim.sim.ir import BITVEC_ALU_OPS, UNARY_ALU_OPS

EXECUTORS = ["numba", "reference"]
LOC = "my_kernel.py:42"
TRN2, TRN3 = get_chip("trn2"), get_chip("trn3")
MIN_II = TRN2.min_ii_cycles
BF16 = ml_dtypes.bfloat16


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


def both_executors(make):
    """Run the OneOp built by ``make()`` on both executors; assert bit equality; return outputs."""
    results = [make().run(e) for e in EXECUTORS]
    for name in results[0]:
        a, b = results[0][name], results[1][name]
        assert np.array_equal(bits_of(a), bits_of(b)), (name, a, b)
    return results[0]


def bits_of(a):
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def f32_of(a):
    return np.asarray(a).astype(np.float32)


def round_to(values, dtype):
    """fp32 values rounded to ``dtype`` (RNE), as the simulator writes them."""
    return np.asarray(values, np.float32).astype(dtype_of(dtype).numpy)


_RNG = np.random.default_rng(1234)
X = _RNG.standard_normal((128, 64)).astype(np.float32)
Y = _RNG.standard_normal((128, 64)).astype(np.float32) + 0.5


# ---------------------------------------------------------------- fuzz: the executors agree

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FLOAT_DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "tfloat32"]
INT_DTYPES = ["int8", "int16", "int32", "uint8", "uint16", "uint32"]
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-45, 3e38, -1.0, 0.5],
                    dtype=np.float32)


def random_data(dtype, shape, rng):
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
def elementwise_case(draw, opcodes):
    """One random instruction of ``opcodes``: (opcode, dtypes, shape, immediates, operand0 as a tile,
    strided, first source in PSUM, data seed)."""
    opcode = draw(st.sampled_from(opcodes))
    bitvec = opcode in (Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR) and draw(st.booleans())
    pool = INT_DTYPES if bitvec else FLOAT_DTYPES + INT_DTYPES
    dtypes = [draw(st.sampled_from(pool)) for _ in range(4)]
    shape = draw(shapes)
    arith = [op for op in AluOp if op not in UNARY_ALU_OPS and op not in BITVEC_ALU_OPS]
    bit_ops = [AluOp.bitwise_and, AluOp.bitwise_or, AluOp.bitwise_xor, AluOp.left_shift, AluOp.right_shift]
    ops = bit_ops if bitvec else arith + ([] if opcode is not Opcode.TENSOR_SCALAR else
                                          sorted(UNARY_ALU_OPS - {AluOp.invert}))
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
        imm["op"] = draw(st.sampled_from(sorted(NATIVE_INT_ALU_OPS)))
    tile = opcode is Opcode.TENSOR_SCALAR and draw(st.booleans())
    strided = draw(st.booleans())
    psum = imm["engine"] is not Engine.GPSIMD and opcode is not Opcode.MEMSET and draw(st.booleans())
    return opcode, dtypes, shape, imm, tile, strided, psum, draw(st.integers(0, 2**32 - 1))


def assert_executors_agree(case):
    """Run a case of :func:`elementwise_case` on both executors: they write the same bits (a case
    the checks reject is skipped; the checks have their own tests)."""
    opcode, dtypes, (p, f), imm, tile, strided, psum, seed = case
    rng = np.random.default_rng(seed)
    dst_dtype = dtypes[0]

    def make():
        k = OneOp()
        width = 2 * f if strided else f

        def src(i, dtype):
            memory = Memory.PSUM if psum and i == 0 else Memory.SBUF
            t = k.load(f"s{i}", random_data(dtype, (p, width), rng), memory)
            return t.ap([[width, p], [2, f]]) if strided else t.ap()
        n_src = {Opcode.TENSOR_TENSOR: 2, Opcode.TENSOR_SCALAR: 1, Opcode.SCALAR_TENSOR_TENSOR: 2,
                 Opcode.TENSOR_COPY: 1, Opcode.SELECT: 3, Opcode.TENSOR_COPY_PREDICATED: 2,
                 Opcode.MEMSET: 0}[opcode]
        srcs = [src(i, dtypes[i + 1]) for i in range(n_src)]
        kw = dict(imm)
        if tile:
            col = k.load("col", random_data(dtypes[1] if dtypes[1] in INT_DTYPES else "float32", (p, 1), rng))
            srcs.append(col)
            kw["operand0_is_tile"] = True
            kw.pop("operand0")
        init = random_data(dst_dtype, (p, f), rng) if opcode is Opcode.TENSOR_COPY_PREDICATED else None
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
    assert np.array_equal(bits_of(results[0]), bits_of(results[1]))


# ---------------------------------------------------------------- costs and checks

def engine_cycles(build, chip=TRN2):
    """Engine cycles of the last instruction of the Program ``build(b)`` makes."""
    b = ProgramBuilder("cost")
    build(b)
    program = b.build()
    prep = sim.prepare(program, chip)
    ins = program.instructions[-1]
    ns = prep.timeline.end_ns[-1] - prep.timeline.start_ns[-1]
    return ns * chip.clock_hz(ins.engine.clock_name) / 1e9


def rejects(build, cls, match, chip="trn2"):
    b = ProgramBuilder("bad")
    build(b)
    with pytest.raises(cls, match=match) as info:
        sim.prepare(b.build(), chip)
    assert LOC in str(info.value)
    assert type(info.value) is cls


def emit(opcode, dst, srcs, **kw):
    return lambda b: b.emit(opcode, dst(b), [s(b) for s in srcs], location=LOC, **kw)


def tile(name, shape=(128, 64), dtype="float32", memory=Memory.SBUF):
    return lambda b: b.tensor(name, memory, shape, dtype)


F = tile("f")


def I32(name):  # reads as a dtype in the check tables
    return tile(name, dtype="int32")
