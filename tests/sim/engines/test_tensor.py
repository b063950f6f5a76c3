"""TensorE: nc_matmul and nc_transpose (TensorE and VectorE) — values, executor agreement, cost, checks."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, UninitializedReadError
from neuronsim.sim import Engine, Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import dtype_of
from neuronsim.sim.memory.state import core_memory

EXECUTORS = ("reference", "numba")
KERNEL = "tensor_kernel.py"


def at(line: int) -> str:
    return f"{KERNEL}:{line}"


def read_on_chip(result, decl) -> np.ndarray:
    """An SBUF/PSUM tensor's contents right after a run, ``[partitions, free]`` in its host dtype."""
    mem = core_memory(result.prepared.chip)
    buf, off = mem.on_chip_base(decl, result.prepared.placement)
    pitch = mem.pitch[decl.memory]
    rows = np.stack([buf[off + p * pitch: off + p * pitch + decl.bytes_per_partition]
                     for p in range(decl.partitions)])
    return rows.view(decl.dtype.numpy).reshape(decl.partitions, decl.free_size)


def run_each(program, arrays, chip="trn2", read=()):
    """{executor: {name: array}} with the HBM outputs and the on-chip tensors in ``read``."""
    out = {}
    for executor in EXECUTORS:
        result = sim.run(program, arrays, chip, executor=executor, uninitialized_memory="zero")
        values = {name: a.copy() for name, a in result.outputs.items()}
        values.update({decl.name: read_on_chip(result, decl) for decl in read})
        out[executor] = values
    return out


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_bits_equal(a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(bits(a), bits(b))


def kordered_matmul(stationary: np.ndarray, moving: np.ndarray) -> np.ndarray:
    """The documented sum, written independently: fp32, k ascending, one fused multiply-add per
    product. The oracle FMA runs in x87 extended precision (64-bit significand): the fp32 product is
    exact there, and the sum's double rounding (to 64 bits, then 24) can only differ from a single
    rounding when the exact sum needs over 64 bits and lies within 2^-40 ulp of an fp32 rounding
    boundary, which these seeded random inputs do not hit."""
    assert np.finfo(np.longdouble).nmant >= 63, "the oracle needs x87 extended (or wider) long double"
    s, m = stationary.astype(np.longdouble), moving.astype(np.longdouble)
    out = np.zeros((s.shape[1], m.shape[1]), np.float32)
    for k in range(s.shape[0]):
        out = (out.astype(np.longdouble) + s[k][:, None] * m[k][None, :]).astype(np.float32)
    return out


def steady_chip(name="trn2"):
    """The chip with TensorE throttling off, so every duration is cycles / clock."""
    return dataclasses.replace(get_chip(name), tensor_throttle_start_fraction=1.0)


def durations_ns(result) -> np.ndarray:
    return result.timeline.end_ns - result.timeline.start_ns


# ---------------------------------------------------------------- nc_matmul values

def _matmul_program(k, m, n, st_dtype, mv_dtype, accumulate_second=False):
    b = ProgramBuilder("matmul")
    a_hbm = b.hbm("a", (k, m), st_dtype)
    b_hbm = b.hbm("b", (k, n), mv_dtype)
    a_sb = b.sbuf("a_sb", (k, m), st_dtype)
    b_sb = b.sbuf("b_sb", (k, n), mv_dtype)
    ps = b.psum("ps", (m, n))
    b.emit(Opcode.DMA_COPY, a_sb, [a_hbm], location=at(1))
    b.emit(Opcode.DMA_COPY, b_sb, [b_hbm], location=at(2))
    b.emit(Opcode.NC_MATMUL, ps, [a_sb, b_sb], location=at(3))
    if accumulate_second:
        b.emit(Opcode.NC_MATMUL, ps, [a_sb, b_sb], location=at(4), accumulate=True)
    return b.build(), ps


def _host(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host array for an HBM tensor of ``dtype`` (tfloat32 lives in float32, low 13 bits zero)."""
    if dtype == "tfloat32":
        return (values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    numpy_dtype = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3": ml_dtypes.float8_e4m3,
                   "float8_e5m2": ml_dtypes.float8_e5m2, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}
    return values.astype(numpy_dtype.get(dtype, dtype))


def test_matmul_fp32_is_the_k_ordered_fp32_sum():
    """nc_matmul: dst[m, n] = sum_k stationary[k, m] * moving[k, n], fp32, k = 0..K-1 in order,
    each product added by a fused multiply-add (rounded once); bit-exact on both executors."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal((128, 200)).astype(np.float32)
    program, ps = _matmul_program(128, 96, 200, "float32", "float32")
    got = run_each(program, {"a": a, "b": b}, read=[ps])
    expected = kordered_matmul(a, b)
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["ps"], expected)
    # The order and the roundings are visible: a float64 sum, or products rounded before they are
    # added, differ in the low bits.
    assert not np.array_equal(expected, (a.astype(np.float64).T @ b).astype(np.float32))
    unfused = np.zeros_like(expected)
    for k in range(a.shape[0]):
        unfused += np.multiply.outer(a[k], b[k])
    assert not np.array_equal(expected, unfused)


def test_matmul_accumulate_adds_onto_psum():
    """nc_matmul accumulate=True: dst = old dst + (k-ordered fp32 sum), the sum formed first."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(np.float32)
    program, ps = _matmul_program(64, 32, 48, "float32", "float32", accumulate_second=True)
    got = run_each(program, {"a": a, "b": b}, read=[ps])
    once = kordered_matmul(a, b)
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["ps"], (once + once).astype(np.float32))


@pytest.mark.parametrize("chip, st_dtype, mv_dtype", [
    ("trn2", "bfloat16", "bfloat16"),
    ("trn2", "float16", "float16"),
    ("trn2", "float8_e4m3", "float8_e5m2"),
    ("trn2", "bfloat16", "float8_e4m3"),
    ("trn2", "tfloat32", "float32"),
    ("trn3", "float8_e4m3fn", "float8_e4m3fn"),
])
def test_matmul_low_precision_inputs(chip, st_dtype, mv_dtype):
    """nc_matmul on bf16/fp16/fp8/tf32 inputs: inputs read exactly into fp32, then the same
    k-ordered fp32 sum (S16 dtypes; float8_e4m3fn from NeuronCore-v4)."""
    rng = np.random.default_rng(3)
    a = _host(rng.standard_normal((128, 128)) * 2, st_dtype)
    b = _host(rng.standard_normal((128, 512)) * 2, mv_dtype)
    program, ps = _matmul_program(128, 128, 512, st_dtype, mv_dtype)
    got = run_each(program, {"a": a, "b": b}, chip=chip, read=[ps])
    expected = kordered_matmul(a, b)
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["ps"], expected)


def test_matmul_on_sub_tile_access_patterns():
    """nc_matmul operands as access patterns: a column window of a wider stationary tile, a moving
    operand with two free dims, a destination window at an offset inside a bigger PSUM tile."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((32, 100)).astype(np.float32)
    b = rng.standard_normal((32, 6, 10)).astype(np.float32)
    pb = ProgramBuilder("sub_tiles")
    a_hbm, b_hbm = pb.hbm("a", (32, 100), "float32"), pb.hbm("b", (32, 6, 10), "float32")
    a_sb, b_sb = pb.sbuf("a_sb", (32, 100), "float32"), pb.sbuf("b_sb", (32, 6, 10), "float32")
    ps = pb.psum("ps", (128, 128))
    pb.emit(Opcode.DMA_COPY, a_sb, [a_hbm], location=at(1))
    pb.emit(Opcode.DMA_COPY, b_sb, [b_hbm], location=at(2))
    stationary = a_sb.ap([[100, 32], [1, 40]], offset=7)  # columns 7..46
    moving = b_sb.ap([[60, 32], [10, 6], [2, 5]], offset=1)  # b[:, :, 1::2]
    dst = ps.ap([[128, 40], [1, 30]], offset=128 * 64 + 50)  # rows 64..103 (start rule), columns 50..79
    pb.emit(Opcode.NC_MATMUL, dst, [stationary, moving], location=at(3))
    got = run_each(pb.build(), {"a": a, "b": b}, read=[ps])
    expected = np.zeros((128, 128), np.float32)
    expected[64:104, 50:80] = kordered_matmul(a[:, 7:47], b[:, :, 1::2].reshape(32, 30))
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["ps"], expected)


@pytest.mark.parametrize("seed", range(4))
def test_matmul_executors_agree_bit_for_bit(seed):
    """Reference and Numba executors: identical PSUM bits for random shapes, dtypes, specials."""
    rng = np.random.default_rng(100 + seed)
    k, m, n = (int(rng.integers(1, 129)), int(rng.integers(1, 129)), int(rng.integers(1, 513)))
    st_dtype, mv_dtype = [("float32", "float32"), ("bfloat16", "float16"), ("float8_e5m2", "bfloat16"),
                          ("tfloat32", "tfloat32")][seed]
    a = rng.standard_normal((k, m)) * 10.0 ** rng.integers(-3, 4, (k, m))
    b = rng.standard_normal((k, n)) * 10.0 ** rng.integers(-3, 4, (k, n))
    a.flat[rng.integers(0, a.size, 3)] = [np.inf, -np.inf, np.nan]
    program, ps = _matmul_program(k, m, n, st_dtype, mv_dtype, accumulate_second=True)
    got = run_each(program, {"a": _host(a, st_dtype), "b": _host(b, mv_dtype)}, read=[ps])
    assert_bits_equal(got["reference"]["ps"], got["numba"]["ps"])


def test_accumulate_reads_psum_before_it_is_written():
    """accumulate=True reads the destination: accumulating onto unwritten PSUM is an uninitialized
    read (uninitialized_memory='error'), not a TensorE access of PSUM."""
    pb = ProgramBuilder("acc_first")
    a_sb, b_sb = pb.sbuf("a", (16, 16), "bfloat16"), pb.sbuf("b", (16, 16), "bfloat16")
    ps = pb.psum("ps", (16, 16))
    pb.emit(Opcode.DMA_COPY, a_sb, [pb.hbm("a_in", (16, 16), "bfloat16")], location=at(1))
    pb.emit(Opcode.DMA_COPY, b_sb, [pb.hbm("b_in", (16, 16), "bfloat16")], location=at(2))
    pb.emit(Opcode.NC_MATMUL, ps, [a_sb, b_sb], location=at(3), accumulate=True)
    with pytest.raises(UninitializedReadError) as err:
        sim.prepare(pb.build(), "trn2", uninitialized_memory="error")
    assert err.value.location == at(3)
    written_first, _ = _matmul_program(16, 16, 16, "bfloat16", "bfloat16", accumulate_second=True)
    sim.prepare(written_first, "trn2", uninitialized_memory="error")  # overwrite, then accumulate: fine


# ---------------------------------------------------------------- nc_matmul cost

def _matmul_stream(count, k, m, n, dtype):
    b = ProgramBuilder("stream")
    a_sb, b_sb = b.sbuf("a", (k, m), dtype), b.sbuf("b", (k, n), dtype)
    ps = b.psum("ps", (m, n))
    for i in range(count):
        b.emit(Opcode.NC_MATMUL, ps, [a_sb, b_sb], location=at(10 + i))
    return b.build()


def test_matmul_stream_reaches_512_cycles_after_throttle_ramp():
    """nc_matmul cost max(min(64, N_stationary), N_moving) TensorE cycles (S23): 128x128 x 128x512
    bf16 is 512 cycles = 213.3 ns at 2.4 GHz once the ~3 us dI/dt ramp (S26, starting at 50%) is over."""
    result = sim.run(_matmul_stream(40, 128, 128, 512, "bfloat16"), chip="trn2", uninitialized_memory="zero")
    d = durations_ns(result)
    assert d[0] == pytest.approx(512 / 2.4 / 0.5)  # the burst starts at 50% of full rate
    assert np.all(np.diff(d) <= 1e-9)  # ramping up
    steady = result.timeline.start_ns >= 3000.0
    assert steady.sum() >= 10
    np.testing.assert_allclose(d[steady], 512 / 2.4, rtol=1e-12)
    assert 512 / 2.4 == pytest.approx(213.3, abs=0.05)


def test_matmul_fp32_costs_4x():
    """nc_matmul with fp32 inputs: 4 x max(min(64, N_stationary), N_moving) = 2048 cycles for
    128x128 x 128x512 (S23: fp32 ~4x bf16), 853.3 ns at full rate."""
    result = sim.run(_matmul_stream(12, 128, 128, 512, "float32"), chip="trn2", uninitialized_memory="zero")
    d = durations_ns(result)
    steady = result.timeline.start_ns >= 3000.0
    assert steady.sum() >= 3
    np.testing.assert_allclose(d[steady], 4 * 512 / 2.4, rtol=1e-12)


@pytest.mark.parametrize("m, n, dtype, cycles", [
    (128, 16, "bfloat16", 64),  # small moving: the 64-cycle MM init latency bounds it
    (32, 16, "bfloat16", 32),  # min(64, N_stationary) = 32
    (128, 100, "float8_e4m3", 100),
    (128, 300, "float16", 300),
    (8, 4, "tfloat32", 8),  # tf32 runs at bf16 speed (S23)
    (128, 16, "float32", 256),
])
def test_matmul_cost_formula(m, n, dtype, cycles):
    """nc_matmul: max(min(mm_init_latency_cycles=64, N_stationary), N_moving) TensorE cycles,
    x fp32_matmul_cost_factor for fp32 inputs (S23); 2.4 GHz. Throttling off to read the formula."""
    result = sim.run(_matmul_stream(3, 64, m, n, dtype), chip=steady_chip(), uninitialized_memory="zero")
    np.testing.assert_allclose(durations_ns(result), cycles / 2.4, rtol=1e-12)


# ---------------------------------------------------------------- nc_transpose

SPECIAL_F32_BITS = np.array([0x7FA00001, 0xFFC00000, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000,
                             0x7F7FFFFF, 0x3F800000], dtype=np.uint32)


def _transpose_program(p, f, dtype, engine):
    b = ProgramBuilder("transpose")
    x = b.hbm("x", (p, f), dtype)
    x_sb = b.sbuf("x_sb", (p, f), dtype)
    b.emit(Opcode.DMA_COPY, x_sb, [x], location=at(1))
    dst = (b.psum if engine is Engine.TENSOR else b.sbuf)("t", (f, p), dtype)
    b.emit(Opcode.NC_TRANSPOSE, dst, [x_sb], engine=engine, location=at(2))
    return b.build(), dst


@pytest.mark.parametrize("p, f, dtype, engine", [
    (128, 64, "float32", Engine.TENSOR),
    (128, 128, "bfloat16", Engine.TENSOR),
    (7, 100, "float8_e5m2", Engine.TENSOR),
    (32, 32, "int32", Engine.VECTOR),
    (20, 9, "uint16", Engine.VECTOR),
])
def test_transpose_moves_bits(p, f, dtype, engine):
    """nc_transpose: dst[f, p] = data[p, f], bit for bit in the data's dtype (v3 on: TensorE
    transpose is bit-accurate with NaN/Inf, S16) — NaN payloads, -0.0 and subnormals survive."""
    rng = np.random.default_rng(5)
    host_dtype = dtype_of(dtype).numpy
    raw = rng.integers(0, 2 ** (8 * host_dtype.itemsize), size=(p, f), dtype=np.uint64)
    raw = raw.astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[host_dtype.itemsize])
    if dtype == "float32":
        raw.flat[:SPECIAL_F32_BITS.size] = SPECIAL_F32_BITS
    x = raw.view(host_dtype)
    program, dst = _transpose_program(p, f, dtype, engine)
    got = run_each(program, {"x": x}, read=[dst])
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["t"], x.T)


def test_vector_transpose_reads_and_writes_psum():
    """VectorE nc_transpose (<= 32x32) reads and writes SBUF or PSUM (S16)."""
    b = ProgramBuilder("vt_psum")
    x = b.hbm("x", (16, 8), "float32")
    x_sb = b.sbuf("x_sb", (16, 8), "float32")
    p1 = b.psum("p1", (8, 16), "float32")
    p2 = b.psum("p2", (16, 8), "float32")
    b.emit(Opcode.DMA_COPY, x_sb, [x], location=at(1))
    b.emit(Opcode.NC_TRANSPOSE, p1, [x_sb], engine=Engine.VECTOR, location=at(2))
    b.emit(Opcode.NC_TRANSPOSE, p2, [p1], engine=Engine.VECTOR, location=at(3))
    data = np.arange(128, dtype=np.float32).reshape(16, 8)
    got = run_each(b.build(), {"x": data}, read=[p1, p2])
    for executor in EXECUTORS:
        assert_bits_equal(got[executor]["p1"], data.T)
        assert_bits_equal(got[executor]["p2"], data)


def _transpose_stream(count, p, f, dtype, engine):
    b = ProgramBuilder("t_stream")
    x_sb = b.sbuf("x", (p, f), dtype)
    dst = (b.psum if engine is Engine.TENSOR else b.sbuf)("t", (f, p), dtype)
    for i in range(count):
        b.emit(Opcode.NC_TRANSPOSE, dst, [x_sb], engine=engine, location=at(10 + i))
    return b.build()


@pytest.mark.parametrize("p, f, dtype, cycles", [
    (128, 128, "bfloat16", 128),
    (32, 128, "bfloat16", 64),  # max(P, min(64, F)) = min(64, 128)
    (128, 16, "float8_e4m3", 128),
    (16, 8, "float16", 16),
    (128, 128, "float32", 256),  # 4-byte: fp32 matmul factor 4 / transpose-mode speedup 2
    (64, 64, "tfloat32", 64),
])
def test_tensor_transpose_cost(p, f, dtype, cycles):
    """TensorE nc_transpose: max(P, min(64, F)) TensorE cycles (S23), 4-byte dtypes x 4 / 2 (fp32
    through v3's transpose mode, 2x faster than the 4x fp32 matmul path, S10); 2.4 GHz, no throttle."""
    result = sim.run(_transpose_stream(3, p, f, dtype, Engine.TENSOR), chip=steady_chip(),
                     uninitialized_memory="zero")
    np.testing.assert_allclose(durations_ns(result), cycles / 2.4, rtol=1e-12)


def test_tensor_transpose_stream_is_throttled_like_matmul():
    """TensorE transposes share the dI/dt ramp (S26): 50% at the start of a burst, full rate
    (128 cycles = 53.3 ns for 128x128 bf16) after ~3 us."""
    result = sim.run(_transpose_stream(100, 128, 128, "bfloat16", Engine.TENSOR), chip="trn2",
                     uninitialized_memory="zero")
    d = durations_ns(result)
    assert d[0] == pytest.approx(128 / 2.4 / 0.5)
    steady = result.timeline.start_ns >= 3000.0
    np.testing.assert_allclose(d[steady], 128 / 2.4, rtol=1e-12)


@pytest.mark.parametrize("chip, clock_ghz", [("trn2", 0.96), ("trn3", 1.2)])
def test_vector_transpose_cost(chip, clock_ghz):
    """VectorE nc_transpose: max(MIN_II, N) VectorE cycles (S23), N = 32 elements per partition ->
    64 cycles; VectorE runs at 0.96 GHz (trn2) / 1.2 GHz (trn3)."""
    result = sim.run(_transpose_stream(3, 32, 32, "float32", Engine.VECTOR), chip=chip,
                     uninitialized_memory="zero")
    np.testing.assert_allclose(durations_ns(result), 64 / clock_ghz, rtol=1e-12)


# ---------------------------------------------------------------- checks

def _bad_matmul(chip="trn2", k=(128, 128), m=128, n=512, dtypes=("bfloat16", "bfloat16"), dst_shape=None,
                dst_dtype="float32", psum_address=None, psum_shape=None, dst_pattern=None, n_srcs=2, **imm):
    b = ProgramBuilder("bad")
    a_sb = b.sbuf("a", (k[0], m), dtypes[0])
    b_sb = b.sbuf("b", (k[1], n), dtypes[1])
    ps = b.psum("ps", psum_shape or dst_shape or (m, n), dst_dtype, address=psum_address)
    dst = ps.ap(dst_pattern) if dst_pattern else ps
    b.emit(Opcode.NC_MATMUL, dst, [a_sb, b_sb][:n_srcs], location=at(42), **imm)
    return b.build(), chip


MATMUL_ERRORS = [
    (dict(n=1024), ConstraintError, "512"),
    (dict(m=256, dst_shape=(128, 512)), ConstraintError, "matmul_stationary_free_max"),
    (dict(k=(128, 64)), ConstraintError, "contraction"),
    (dict(dst_shape=(128, 256)), ConstraintError, "gives [128, 512]"),
    (dict(dst_dtype="bfloat16"), DtypeError, "float32"),
    (dict(dtypes=("int8", "bfloat16")), DtypeError, "int8"),
    (dict(dtypes=("float32", "bfloat16")), DtypeError, "only pair"),
    (dict(dtypes=("float8_e4m3fn", "bfloat16")), DtypeError, "float8_e4m3fn"),
    (dict(n=512, psum_address=(0, 1024)), ConstraintError, "bank"),
    (dict(n=512, psum_shape=(128, 1024), dst_pattern=[[1024, 128], [2, 512]]), ConstraintError, "2048"),
    (dict(acumulate=True), ConstraintError, "unknown immediates"),
    (dict(n_srcs=1), ConstraintError, "source operand"),
]


@pytest.mark.parametrize("kwargs, error, needle", MATMUL_ERRORS, ids=[e[2] for e in MATMUL_ERRORS])
def test_matmul_checks(kwargs, error, needle):
    """Every nc_matmul rule raises its error class, naming the limit and the kernel line."""
    program, chip = _bad_matmul(**kwargs)
    with pytest.raises(error) as err:
        sim.prepare(program, chip)
    assert type(err.value) is error
    assert err.value.location == at(42)
    assert at(42) in str(err.value) and "nc_matmul" in str(err.value)
    assert needle in str(err.value)


def test_matmul_v4_relaxations():
    """NeuronCore-v4: float8_e4m3fn inputs, moving free up to 4096, results spanning PSUM banks."""
    for kwargs in (dict(dtypes=("float8_e4m3fn", "float8_e4m3"), n=512), dict(n=4096),
                   dict(n=512, psum_address=(0, 1024))):
        program, _ = _bad_matmul(chip="trn3", **kwargs)
        sim.prepare(program, "trn3")
    with pytest.raises(ConstraintError, match="4096"):  # (a small dst: 8192 fp32 would not fit PSUM)
        sim.prepare(_bad_matmul(n=8192, dst_shape=(128, 16))[0], "trn3")


TRANSPOSE_ERRORS = [
    (dict(dst_dtype="float32"), DtypeError, "keeps the dtype"),
    (dict(dst_shape=(64, 64)), ConstraintError, "gives 32x64"),
    (dict(engine=Engine.VECTOR, p=64, f=32), ConstraintError, "32x32"),
    (dict(engine=Engine.VECTOR, p=16, f=48), ConstraintError, "vector_transpose_max_dim"),
]


@pytest.mark.parametrize("kwargs, error, needle", TRANSPOSE_ERRORS, ids=[e[2] for e in TRANSPOSE_ERRORS])
def test_transpose_checks(kwargs, error, needle):
    """nc_transpose rules: same dtype, dst [F, P], VectorE at most 32x32 — typed and located."""
    engine = kwargs.get("engine", Engine.TENSOR)
    p, f = kwargs.get("p", 64), kwargs.get("f", 32)
    b = ProgramBuilder("bad_t")
    x = b.sbuf("x", (p, f), "bfloat16")
    dst = (b.psum if engine is Engine.TENSOR else b.sbuf)("t", kwargs.get("dst_shape", (f, p)),
                                                          kwargs.get("dst_dtype", "bfloat16"))
    b.emit(Opcode.NC_TRANSPOSE, dst, [x], engine=engine, location=at(7))
    with pytest.raises(error) as err:
        sim.prepare(b.build(), "trn2")
    assert type(err.value) is error
    assert err.value.location == at(7) and at(7) in str(err.value)
    assert needle in str(err.value)
