"""ScalarE: activation — values, executor agreement, reduce, cost, checks."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from numba import njit

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import ActFunc, Opcode, ProgramBuilder
from neuronsim.sim.engines.scalar import act_f64, act_np

EXECUTORS = ("reference", "numba")
KERNEL = "scalar_kernel.py"


def at(line: int) -> str:
    return f"{KERNEL}:{line}"


def bits(a: np.ndarray) -> np.ndarray:
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return np.ascontiguousarray(a).view(uint)


def assert_bits_equal(a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(bits(a), bits(b))


def activation_program(shape, func, in_dtype="float32", out_dtype="float32", *, scale=None, bias=None,
                       reduce=False, reduce_dtype="float32", bias_dtype="float32"):
    """HBM x -> SBUF -> activation -> SBUF -> HBM y (and the reduce result to HBM r).

    ``scale`` / ``bias``: a float (immediate), the string "tile" (an HBM input [P, 1] loaded into an
    SBUF tile: fp32, a bias of ``bias_dtype``), or None (the default)."""
    p = shape[0]
    b = ProgramBuilder("act")
    x = b.hbm("x", shape, in_dtype)
    x_sb = b.sbuf("x_sb", shape, in_dtype)
    y_sb = b.sbuf("y_sb", shape, out_dtype)
    b.emit(Opcode.DMA_COPY, x_sb, [x], location=at(1))
    srcs, imm = [x_sb], {"func": func}
    for name, value in (("bias", bias), ("scale", scale)):  # operand order: data, bias, scale
        if value == "tile":
            dtype = bias_dtype if name == "bias" else "float32"
            t_hbm, t_sb = b.hbm(name, (p, 1), dtype), b.sbuf(f"{name}_sb", (p, 1), dtype)
            b.emit(Opcode.DMA_COPY, t_sb, [t_hbm], location=at(2))
            srcs.append(t_sb)
            imm[f"{name}_is_tile"] = True
        elif value is not None:
            imm[name] = value
    r_sb = None
    if reduce:
        r_sb = b.sbuf("r_sb", (p, 1), reduce_dtype)
        imm["reduce"] = True
    b.emit(Opcode.ACTIVATION, y_sb, srcs, dst2=r_sb, location=at(3), **imm)
    b.emit(Opcode.DMA_COPY, b.hbm("y", shape, out_dtype, kind="output"), [y_sb], location=at(4))
    if reduce:
        b.emit(Opcode.DMA_COPY, b.hbm("r", (p, 1), reduce_dtype, kind="output"), [r_sb], location=at(5))
    return b.build()


def run_each(program, arrays, chip="trn2"):
    """{executor: outputs}, each run on fresh copies of the inputs."""
    return {e: {k: v.copy() for k, v in sim.run(program, arrays, chip, executor=e).outputs.items()}
            for e in EXECUTORS}


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# ---------------------------------------------------------------- values against numpy

SQRT2 = np.float32(math.sqrt(2.0))


def _expected_f32(func: ActFunc, a: np.ndarray) -> np.ndarray:
    """Each function written with numpy float32 math (scipy for erf): an independent statement."""
    with np.errstate(all="ignore"):
        table = {
            ActFunc.copy: lambda: a,
            ActFunc.identity: lambda: a,
            ActFunc.exp: lambda: np.exp(a),
            ActFunc.log: lambda: np.log(a),
            ActFunc.tanh: lambda: np.tanh(a),
            ActFunc.sigmoid: lambda: 1 / (1 + np.exp(-a)),
            ActFunc.relu: lambda: np.maximum(a, 0),
            ActFunc.gelu: lambda: 0.5 * a * (1 + scipy.special.erf(a / SQRT2)),
            ActFunc.gelu_dx: lambda: (0.5 * (1 + scipy.special.erf(a / np.float64(SQRT2)))
                                      + a * np.exp(-0.5 * np.float64(a) ** 2) / math.sqrt(2 * math.pi)),
            ActFunc.gelu_apprx_tanh: lambda: 0.5 * a * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi))
                                                                   * (a + np.float32(0.044715) * a ** 3))),
            ActFunc.silu: lambda: a / (1 + np.exp(-a)),
            ActFunc.gelu_apprx_sigmoid: lambda: a / (1 + np.exp(np.float32(-1.702) * a)),
            ActFunc.softplus: lambda: np.logaddexp(np.float32(0), a),
            ActFunc.sqrt: lambda: np.sqrt(a),
            ActFunc.rsqrt: lambda: 1 / np.sqrt(a),
            ActFunc.reciprocal: lambda: 1 / a,
            ActFunc.square: lambda: a * a,
            ActFunc.erf: lambda: scipy.special.erf(a),
            ActFunc.sin: lambda: np.sin(a),
            ActFunc.abs: lambda: np.abs(a),
            ActFunc.sign: lambda: np.sign(a),
        }
        return f32(table[func]())


# correctly rounded in fp32 whichever way they are computed: compared bit for bit
EXACT = {ActFunc.copy, ActFunc.identity, ActFunc.relu, ActFunc.sqrt, ActFunc.reciprocal, ActFunc.square,
         ActFunc.abs, ActFunc.sign}
POSITIVE_DOMAIN = {ActFunc.log, ActFunc.sqrt, ActFunc.rsqrt}


@pytest.mark.parametrize("func", list(ActFunc), ids=[f.name for f in ActFunc])
def test_activation_values_against_numpy(func):
    """activation: y = func(data * scale + bias), the product and the sum each rounded to fp32, func
    evaluated once and rounded to fp32 (S16). Compared with numpy float32 math: bit-exact for the
    correctly rounded functions, within a few fp32 ulps for the transcendental ones."""
    rng = np.random.default_rng(int(func) + 10)
    x = f32(rng.uniform(-4, 4, (128, 256)))
    if func in POSITIVE_DOMAIN:
        x = np.abs(x) + np.float32(0.5)  # keeps data * 0.75 - 0.25 positive
    if func is ActFunc.sin:
        x = f32(rng.uniform(-3.5, 3.5, (128, 256)))  # hardware range [-pi, pi] after scale/bias
    scale, bias = 0.75, -0.25
    got = run_each(activation_program(x.shape, func, scale=scale, bias=bias), {"x": x})
    arg = f32(f32(x * np.float32(scale)) + np.float32(bias))
    expected = _expected_f32(func, arg)
    for executor in EXECUTORS:
        y = got[executor]["y"]
        if func in EXACT:
            assert_bits_equal(y, expected)
        else:
            np.testing.assert_allclose(y, expected, rtol=4e-6, atol=2e-7)
    assert_bits_equal(got["reference"]["y"], got["numba"]["y"])


def test_scale_and_bias_tiles_broadcast_per_partition():
    """activation with scale and bias as [P, 1] fp32 tiles: element (p, j) uses scale[p], bias[p]."""
    rng = np.random.default_rng(7)
    x = f32(rng.standard_normal((96, 70)))
    scale, bias = f32(rng.uniform(-2, 2, (96, 1))), f32(rng.uniform(-1, 1, (96, 1)))
    program = activation_program(x.shape, ActFunc.square, scale="tile", bias="tile")
    got = run_each(program, {"x": x, "scale": scale, "bias": bias})
    arg = f32(f32(x * scale) + bias)
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["y"], f32(arg * arg))


@pytest.mark.parametrize("bias_dtype", ["bfloat16", "float16", "int32"])
def test_a_bias_tile_of_another_dtype_is_read_as_float32(bias_dtype):
    """S16: the bias may be any dtype but tfloat32 (nki-library's qkv_cte passes a bfloat16 zero
    bias); ScalarE computes in fp32, so the bias is cast to fp32 as data is."""
    rng = np.random.default_rng(8)
    x = f32(rng.standard_normal((64, 30)))
    numpy_dtype = ml_dtypes.bfloat16 if bias_dtype == "bfloat16" else bias_dtype
    bias = rng.uniform(-4, 4, (64, 1)).astype(numpy_dtype)
    program = activation_program(x.shape, ActFunc.identity, bias="tile", bias_dtype=bias_dtype)
    got = run_each(program, {"x": x, "bias": bias})
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["y"], f32(x + f32(bias)))


# ---------------------------------------------------------------- the two executors agree bit for bit

SPECIAL_F32 = f32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, -3.4e38, 3.4e38, 1e-30,
                   -1e-30, 88.7, 88.8, -87.4, -104.0, 709.0, 1e4, -1e4, 0.5, -0.5, 1.0, -1.0, math.pi,
                   2.0**-64])


def _wide_random(rng, shape) -> np.ndarray:
    """fp32 values spread over every exponent, both signs, with the special values up front."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape).astype(np.float64))
    x = f32(x)
    x.flat[:SPECIAL_F32.size] = SPECIAL_F32
    return x


@pytest.mark.parametrize("func", list(ActFunc), ids=[f.name for f in ActFunc])
def test_executors_agree_on_every_function(func):
    """Reference and Numba executors: identical dst and reduce_res bits on wide-range and special
    inputs (NaN, +-inf, +-0, subnormals, overflow edges), scale/bias tiles, a bf16 destination."""
    rng = np.random.default_rng(int(func) + 50)
    x = _wide_random(rng, (128, 200))
    scale, bias = f32(rng.uniform(-3, 3, (128, 1))), f32(rng.uniform(-3, 3, (128, 1)))
    scale[:4, 0] = [1.0, 1.0, 0.0, -1.0]
    bias[:4, 0] = [0.0, -0.0, 0.0, 100.0]
    program = activation_program(x.shape, func, out_dtype="bfloat16", scale="tile", bias="tile", reduce=True)
    got = run_each(program, {"x": x, "scale": scale, "bias": bias})
    assert_bits_equal(got["reference"]["y"], got["numba"]["y"])
    assert_bits_equal(got["reference"]["r"], got["numba"]["r"])


@njit  # not cached: Numba would not notice a change to act_f64 in another file
def _act_f64_array(func, x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = act_f64(func, x[i])
    return out


@pytest.mark.parametrize("func", list(ActFunc), ids=[f.name for f in ActFunc])
def test_function_twins_agree_in_float64(func):
    """The Numba function (libm through Numba's math) and the reference (libm through Python's math,
    numpy for exact operations) agree in float64 itself, not only after the fp32 rounding."""
    rng = np.random.default_rng(int(func) + 90)
    x = np.concatenate([SPECIAL_F32, _wide_random(rng, 20_000).ravel(), f32(rng.uniform(-30, 30, 20_000))])
    x = x.astype(np.float64)
    numba_values, ref_values = _act_f64_array(int(func), x), act_np(func, x)
    nan = np.isnan(numba_values)
    np.testing.assert_array_equal(nan, np.isnan(ref_values))
    assert_bits_equal(numba_values[~nan], ref_values[~nan])


# ---------------------------------------------------------------- copy, casts, reduce

def test_copy_moves_bits_when_dtypes_match():
    """copy/identity with scale 1, bias 0 and one dtype are bit-accurate (v3 on, S10): NaN payloads,
    -0.0 and int32 beyond 2^24 survive. With a scale the same function computes through fp32."""
    x = np.array([[0x7FA00001, 0x80000000, 0xFFC00123, 0x00000001]], dtype=np.uint32).view(np.float32)
    for func in (ActFunc.copy, ActFunc.identity):
        got = run_each(activation_program(x.shape, func), {"x": x})
        for executor in EXECUTORS:
            assert_bits_equal(got[executor]["y"], x)
        scaled = run_each(activation_program(x.shape, func, scale=2.0), {"x": x})
        for executor in EXECUTORS:  # NaN canonical, -0.0 * 2 + 0.0 = +0.0, 2 * 2^-149 = 2^-148
            assert_bits_equal(scaled[executor]["y"], np.array([[0x7FC00000, 0, 0x7FC00000, 2]], np.uint32))
    ints = np.array([[2**24 + 1, -(2**31), 2**31 - 1, 7]], dtype=np.int32)
    got = run_each(activation_program(ints.shape, ActFunc.copy, "int32", "int32"), {"x": ints})
    for executor in EXECUTORS:
        np.testing.assert_array_equal(got[executor]["y"], ints)


def test_copy_to_another_dtype_casts_round_to_nearest_even():
    """copy fp32 -> bf16 is a cast: fp32 value rounded to nearest even on the write."""
    rng = np.random.default_rng(8)
    x = f32(rng.standard_normal((64, 128)))
    got = run_each(activation_program(x.shape, ActFunc.copy, out_dtype="bfloat16"), {"x": x})
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["y"], x.astype(ml_dtypes.bfloat16))


def test_reduce_sums_fp32_results_left_to_right():
    """activation reduce: reduce_res[p] = fp32 sum of the fp32 results (before the destination's
    rounding) along the free dim, added left to right (S16 reset_reduce + ActReadAccumulator)."""
    rng = np.random.default_rng(9)
    x = f32(rng.uniform(-3, 3, (128, 300)))
    program = activation_program(x.shape, ActFunc.square, out_dtype="bfloat16", scale=1.1, reduce=True)
    got = run_each(program, {"x": x})
    y = f32(f32(x * np.float32(1.1)) + np.float32(0.0)) ** 2
    expected = np.zeros((128, 1), np.float32)
    for j in range(y.shape[1]):
        expected[:, 0] = f32(expected[:, 0] + y[:, j])
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["r"], expected)
        assert_bits_equal(got[executor]["y"], y.astype(ml_dtypes.bfloat16))
    rounded_sum = y.astype(ml_dtypes.bfloat16).astype(np.float32).sum(axis=1, keepdims=True)
    assert not np.array_equal(expected, rounded_sum)  # the bf16-rounded values would give another sum


# ---------------------------------------------------------------- cost

def _durations(program, chip) -> np.ndarray:
    result = sim.run(program, chip=chip, uninitialized_memory="zero")
    is_activation = np.array([ins.opcode is Opcode.ACTIVATION for ins in program.instructions])
    return (result.timeline.end_ns - result.timeline.start_ns)[is_activation]


def _activation_stream(shape, in_dtype, out_dtype, reduce=False, count=3):
    b = ProgramBuilder("act_stream")
    x = b.sbuf("x", shape, in_dtype)
    y = b.sbuf("y", shape, out_dtype)
    r = b.sbuf("r", (shape[0], 1), "float32") if reduce else None
    for i in range(count):
        b.emit(Opcode.ACTIVATION, y, [x], dst2=r, location=at(10 + i), func=ActFunc.exp,
               **({"reduce": True} if reduce else {}))
    return b.build()


@pytest.mark.parametrize("chip, shape, in_dtype, out_dtype, reduce, cycles", [
    ("trn2", (128, 512), "float32", "float32", False, 512),
    ("trn2", (128, 16), "float32", "float32", False, 64),  # MIN_II bounds small tiles
    ("trn2", (1, 2048), "bfloat16", "bfloat16", False, 2048),  # partitions are free; no 16-bit speedup on v3
    ("trn2", (128, 512), "float32", "bfloat16", True, 512 + 64),  # + ActReadAccumulator
    ("trn3", (128, 512), "bfloat16", "bfloat16", False, 256),  # v4: 256 lanes for 16-bit in and out
    ("trn3", (128, 100), "float16", "bfloat16", False, 64),  # max(MIN_II, 100 / 2)
    ("trn3", (128, 512), "bfloat16", "float32", False, 512),  # fp32 out: no speedup
    ("trn3", (128, 512), "bfloat16", "bfloat16", True, 256 + 64),
])
def test_activation_cost(chip, shape, in_dtype, out_dtype, reduce, cycles):
    """activation: max(MIN_II=64, N / speedup) ScalarE cycles (S23), + act_read_accumulator_cycles
    (64) with reduce; speedup = scalar_engine_16bit_speedup (2 on v4) for 16-bit in and out (S11);
    ScalarE at 1.2 GHz."""
    d = _durations(_activation_stream(shape, in_dtype, out_dtype, reduce), chip)
    np.testing.assert_allclose(d, cycles / 1.2, rtol=1e-12)


def test_activation_512_is_426_ns():
    """activation, 128 x 512 fp32 on trn2: max(64, 512) = 512 ScalarE cycles at 1.2 GHz = 426.7 ns."""
    d = _durations(_activation_stream((128, 512), "float32", "float32"), "trn2")
    assert d[0] == pytest.approx(426.67, abs=0.01)


# ---------------------------------------------------------------- checks

def _bad(**kw):
    """One activation with the given overrides; srcs/dst/dst2 may be given as shapes or dtypes."""
    b = ProgramBuilder("bad_act")
    data = b.sbuf("x", kw.pop("data_shape", (64, 32)), kw.pop("data_dtype", "float32"))
    dst = b.sbuf("y", kw.pop("dst_shape", data.shape), "float32")
    srcs = [data] + [b.sbuf(f"t{i}", shape, dtype) for i, (shape, dtype) in enumerate(kw.pop("tiles", []))]
    dst2_shape = kw.pop("dst2_shape", None)
    dst2 = b.sbuf("r", dst2_shape, "float32") if dst2_shape else None
    imm = {"func": ActFunc.exp, **kw}
    b.emit(Opcode.ACTIVATION, dst, srcs, dst2=dst2, location=at(99), **imm)
    return b.build()


ACTIVATION_ERRORS = [
    (dict(dst_shape=(64, 16)), ConstraintError, "dst is 64x16"),
    (dict(tiles=[((64, 1), "float32")]), ConstraintError, "source operand"),
    (dict(bias_is_tile=True), ConstraintError, "source operand"),
    (dict(bias_is_tile=True, tiles=[((64, 2), "float32")]), ConstraintError, "bias tile is 64x2"),
    (dict(scale_is_tile=True, tiles=[((32, 1), "float32")]), ConstraintError, "scale tile is 32x1"),
    (dict(scale_is_tile=True, tiles=[((64, 1), "bfloat16")]), DtypeError, "float32"),
    (dict(bias_is_tile=True, tiles=[((64, 1), "tfloat32")]), DtypeError, "bias tile dtype tfloat32"),
    (dict(reduce=True), ConstraintError, "needs dst2"),
    (dict(reduce=True, dst2_shape=(64, 2)), ConstraintError, "dst2 (reduce_res) is 64x2"),
    (dict(dst2_shape=(64, 1)), ConstraintError, "reduce=False"),
    (dict(func="gelu_fast"), ConstraintError, "not an activation function"),
    (dict(func=None), ConstraintError, "not an activation function"),
    (dict(scale="2"), ConstraintError, "must be a float"),
    (dict(reduce_op="max"), ConstraintError, "unknown immediates"),
]


@pytest.mark.parametrize("kwargs, error, needle", ACTIVATION_ERRORS, ids=[e[2] for e in ACTIVATION_ERRORS])
def test_activation_checks(kwargs, error, needle):
    """Every activation rule raises its error class, naming what is wrong and the kernel line."""
    with pytest.raises(error) as err:
        sim.prepare(_bad(**kwargs), "trn2")
    assert type(err.value) is error
    assert err.value.location == at(99)
    assert at(99) in str(err.value) and "activation" in str(err.value)
    assert needle in str(err.value)


def test_activation_accepts_names_and_psum_data():
    """func may be an ActFunc, its int or its name; data may come from PSUM (ScalarE reads PSUM)."""
    for func in (ActFunc.tanh, int(ActFunc.tanh), "tanh"):
        sim.prepare(_bad(func=func), "trn2")
    b = ProgramBuilder("psum_in")
    ps, y = b.psum("ps", (128, 64)), b.sbuf("y", (128, 64), "bfloat16")
    b.emit(Opcode.ACTIVATION, y, [ps], func=ActFunc.relu, location=at(1))
    sim.run(b.build(), chip="trn2", uninitialized_memory="zero")
