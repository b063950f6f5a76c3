"""MX family (NeuronCore-v4): QUANTIZE_MX and NC_MATMUL_MX against an independent numpy model of
the OCP MX formats (S16 quantize_mx / nc_matmul_mx, S11 layout)."""

import ml_dtypes
import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, UninitializedReadError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.engines.mx import FMT_E2M1FN, FMT_E4M3FN, FMT_E5M2

EXECUTORS = ["numba", "reference"]
EMAX = {FMT_E4M3FN: 8, FMT_E5M2: 15}
FP8 = {FMT_E4M3FN: ml_dtypes.float8_e4m3fn, FMT_E5M2: ml_dtypes.float8_e5m2}


def scale_rows(p):
    return [(g * 8 // 32) * 32 + g % 4 for g in range(p // 8)]


def quantize_model(x: np.ndarray, fmt: int, ocp: bool = False):
    """S16 (NKI 0.5 on): X = 2^(floor(log2 amax) - (Emax - 1)) per 8-partition x 4-value group;
    ``ocp`` (NKI 0.3/0.4): the OCP sample scale 2^(floor(log2 amax) - Emax), v / X clamped to the
    element's largest finite value; then v / X to fp8."""
    p, f4 = x.shape
    v = x.astype(np.float32).reshape(p // 8, 8, f4 // 4, 4)
    amax = np.abs(v).max(axis=(1, 3))
    shift = EMAX[fmt] if ocp else EMAX[fmt] - 1
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))).astype(int) - shift, -127)
    top = float(ml_dtypes.finfo(FP8[fmt]).max)
    q = np.clip(v / np.ldexp(1.0, e).astype(np.float32)[:, None, :, None], -top, top).astype(FP8[fmt])
    codes = q.view(np.uint8).astype(np.uint32).reshape(p, f4 // 4, 4)
    words = codes[..., 0] | codes[..., 1] << 8 | codes[..., 2] << 16 | codes[..., 3] << 24
    return words, (e + 127).astype(np.uint8)


def dequantize_model(words, scales, fmt):
    """[4P, F] float64 values, k = 4p + j."""
    p, f = words.shape
    if fmt == FMT_E2M1FN:
        nib = np.stack([(words >> (4 * j)) & 0xF for j in range(4)], axis=1).astype(np.uint8)
        vals = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    else:
        byte = np.stack([(words >> (8 * j)) & 0xFF for j in range(4)], axis=1).astype(np.uint8)
        vals = byte.view(FP8[fmt]).astype(np.float64)
    rows = [(r // 32) * 32 + (r % 32) // 8 for r in range(p)]
    return (vals * np.ldexp(1.0, scales[rows].astype(int) - 127)[:, None, :]).reshape(4 * p, f)


def _quantize_program(p, f, fmt, location="k.py:3", ocp_scale=False):
    b = ProgramBuilder("quantize")
    x = b.hbm("x", (p, 4 * f), "bfloat16")
    x_sb = b.sbuf("x_sb", (p, 4 * f), "bfloat16")
    d, s = b.sbuf("d", (p, f), "uint32"), b.sbuf("s", (p, f), "uint8")
    d_out = b.hbm("d_out", (p, f), "uint32", kind="output")
    s_out = b.hbm("s_out", (p, f), "uint8", kind="output")
    b.emit(Opcode.DMA_COPY, x_sb, [x])
    b.emit(Opcode.MEMSET, s, value=0.0)
    b.emit(Opcode.QUANTIZE_MX, d, [x_sb], dst2=s, fmt=fmt, ocp_scale=ocp_scale, location=location)
    b.emit(Opcode.DMA_COPY, d_out, [d])
    b.emit(Opcode.DMA_COPY, s_out, [s])
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("fmt, ocp",
                         [(FMT_E4M3FN, False), (FMT_E5M2, False), (FMT_E4M3FN, True), (FMT_E5M2, True)])
def test_quantize_matches_the_release_scale_and_layout(executor, fmt, ocp):
    p, f = 64, 16
    rng = np.random.default_rng(fmt)
    x = (rng.standard_normal((p, 4 * f)) * np.exp(rng.uniform(-8, 8, (p, 1)))).astype(ml_dtypes.bfloat16)
    x[:8, :4] = 0  # an all-zero group: scale 2^-127
    x[8:16, 4:8] = 0.25
    x[8, 4:8] = [-1.9921875, 1.0, 0.5, 1.96875]  # v / X past the e4m3fn/e5m2 largest with the OCP scale
    out = sim.run(_quantize_program(p, f, fmt, ocp_scale=ocp), {"x": x}, "trn3", executor=executor).outputs
    words, scales = quantize_model(x, fmt, ocp)
    np.testing.assert_array_equal(out["d_out"], words)
    rows = scale_rows(p)
    np.testing.assert_array_equal(out["s_out"][rows], scales)
    assert out["s_out"][0, 0] == 0
    assert not np.delete(out["s_out"], rows, axis=0).any()  # the other 28 rows of each quadrant: untouched
    if ocp:  # the group of rows 8-15, column 1 saturates: -1.99 / 2^-8 (e4m3fn) is -510 -> -448
        top = ml_dtypes.finfo(FP8[fmt]).max
        first = np.array([out["d_out"][8, 1] & 0xFF], np.uint8).view(FP8[fmt])[0]
        assert first == -top


def test_ocp_scale_is_half_the_documented_one():
    """The same group: NKI 0.3/0.4's scale byte is one less than NKI 0.5/0.6's, its values doubled."""
    x = np.full((32, 4), 3.0, ml_dtypes.bfloat16)
    doc = sim.run(_quantize_program(32, 1, FMT_E4M3FN), {"x": x}, "trn3", executor="reference").outputs
    ocp = sim.run(_quantize_program(32, 1, FMT_E4M3FN, ocp_scale=True), {"x": x}, "trn3",
                  executor="reference").outputs
    assert (doc["s_out"][0, 0], ocp["s_out"][0, 0]) == (127 + 1 - 7, 127 + 1 - 8)
    values = [np.array([w], np.uint32).view(np.uint8).view(ml_dtypes.float8_e4m3fn)[0] for w in
              (doc["d_out"][0, 0], ocp["d_out"][0, 0])]
    assert (float(values[0]), float(values[1])) == (192.0, 384.0)


def _matmul_program(p, m, n, s_fmt, m_fmt, dst_dtype="float32", accumulate=False):
    b = ProgramBuilder("mx_matmul")
    storage = {FMT_E4M3FN: "uint32", FMT_E5M2: "uint32", FMT_E2M1FN: "uint16"}
    names = ("s_data", "m_data", "s_scale", "m_scale")
    shapes = ((p, m), (p, n), (p, m), (p, n))
    dtypes = (storage[s_fmt], storage[m_fmt], "uint8", "uint8")
    tiles = []
    for name, shape, dtype in zip(names, shapes, dtypes, strict=True):
        h = b.hbm(name, shape, dtype)
        t = b.sbuf(name + "_sb", shape, dtype)
        b.emit(Opcode.DMA_COPY, t, [h])
        tiles.append(t)
    acc = b.psum("acc", (m, n), dst_dtype)
    if accumulate:
        b.emit(Opcode.MEMSET, acc, value=1.0)
    b.emit(Opcode.NC_MATMUL_MX, acc, tiles, stationary_fmt=s_fmt, moving_fmt=m_fmt, accumulate=accumulate,
           location="k.py:9")
    o_sb = b.sbuf("o_sb", (m, n), "float32")
    b.emit(Opcode.TENSOR_COPY, o_sb, [acc])
    b.emit(Opcode.DMA_COPY, b.hbm("out", (m, n), "float32", kind="output"), [o_sb])
    return b.build()


def _random_mx(rng, p, f, fmt):
    """Random finite words (fp8 values below 16) and scales near 2^0."""
    if fmt == FMT_E2M1FN:
        words = rng.integers(0, 2**16, (p, f), dtype=np.uint16)
    else:
        byte = rng.integers(0, 256, (p, f, 4), dtype=np.uint8)
        value = byte.view(FP8[fmt]).astype(np.float32)
        byte = np.where(np.isfinite(value) & (np.abs(value) < 16), byte, 0).astype(np.uint32)
        words = (byte[..., 0] | byte[..., 1] << 8 | byte[..., 2] << 16 | byte[..., 3] << 24).astype(np.uint32)
    scales = rng.integers(124, 131, (p, f), dtype=np.uint8)
    return words, scales


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("s_fmt, m_fmt", [(FMT_E4M3FN, FMT_E4M3FN), (FMT_E5M2, FMT_E2M1FN)])
def test_matmul_dequantizes_each_group_and_contracts_4p_values(executor, s_fmt, m_fmt):
    """dst[m, n] = sum_k S[k, m] M[k, n], k = 4p + j, values times their group's E8M0 scale."""
    p, m, n = 64, 32, 48
    rng = np.random.default_rng(7)
    sw, ss = _random_mx(rng, p, m, s_fmt)
    mw, ms = _random_mx(rng, p, n, m_fmt)
    out = sim.run(_matmul_program(p, m, n, s_fmt, m_fmt), {"s_data": sw, "m_data": mw, "s_scale": ss,
                                                            "m_scale": ms}, "trn3", executor=executor).outputs
    s_val, m_val = dequantize_model(sw, ss, s_fmt), dequantize_model(mw, ms, m_fmt)
    bound = 4 * p * 2.0**-24 * (np.abs(s_val).T @ np.abs(m_val))  # fp32 summation error bound
    assert np.all(np.abs(out["out"] - s_val.T @ m_val) <= bound)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_matmul_accumulates_into_bf16_psum(executor):
    p, m, n = 32, 8, 16
    rng = np.random.default_rng(8)
    sw, ss = _random_mx(rng, p, m, FMT_E4M3FN)
    mw, ms = _random_mx(rng, p, n, FMT_E4M3FN)
    arrays = {"s_data": sw, "m_data": mw, "s_scale": ss, "m_scale": ms}
    program = _matmul_program(p, m, n, FMT_E4M3FN, FMT_E4M3FN, "bfloat16", accumulate=True)
    out = sim.run(program, arrays, "trn3", executor=executor).outputs
    exact = 1.0 + dequantize_model(sw, ss, FMT_E4M3FN).T @ dequantize_model(mw, ms, FMT_E4M3FN)
    bf16 = exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.abs(out["out"] - bf16).max() <= np.abs(bf16).max() * 2.0**-7  # within a bf16 ulp


def test_costs_name_their_formulas():
    """quantize_mx: max(MIN_II, N/4) VectorE cycles (S11, 4 values per partition per cycle);
    nc_matmul_mx: max(min(MM_INIT, M), N) TensorE cycles on the x4 shapes (S11: 4x bf16 contraction)."""
    chip = get_chip("trn3")
    q = _quantize_program(128, 512, FMT_E4M3FN)
    tl = sim.prepare(q, chip).timeline
    k = next(i for i, ins in enumerate(q.instructions) if ins.opcode is Opcode.QUANTIZE_MX)
    ghz = chip.vector_engine_clock_hz / 1e9
    assert tl.end_ns[k] - tl.start_ns[k] == pytest.approx(max(chip.min_ii_cycles, 2048 / 4) / ghz)
    mm = _matmul_program(128, 128, 512, FMT_E4M3FN, FMT_E4M3FN)
    k = next(i for i, ins in enumerate(mm.instructions) if ins.opcode is Opcode.NC_MATMUL_MX)
    from neuronsim.sim.engines import OPDEFS
    assert OPDEFS[Opcode.NC_MATMUL_MX].cycles(mm.instructions[k], chip) == max(
        min(chip.mm_init_latency_cycles, 128), 512)


def test_misuse_names_the_line():
    with pytest.raises(ConstraintError, match="k.py:3.*NeuronCore-v4"):
        sim.prepare(_quantize_program(64, 4, FMT_E4M3FN), "trn2")
    with pytest.raises(ConstraintError, match="k.py:3.*multiple of 32"):
        sim.prepare(_quantize_program(16, 4, FMT_E4M3FN), "trn3")
    b = ProgramBuilder()
    d = b.sbuf("d", (32, 4), "float32")
    scale = b.sbuf("s", (4, 4), "uint8")
    acc = b.psum("acc", (4, 4), "float32")
    b.emit(Opcode.NC_MATMUL_MX, acc, [d, d, scale, scale], stationary_fmt=0, moving_fmt=0, location="k.py:5")
    with pytest.raises(DtypeError, match="k.py:5.*float8_e4m3fn_x4 data is uint32"):
        sim.prepare(b.build(), "trn3")


def test_matmul_reads_only_the_scale_rows_for_the_uninitialized_check():
    """S11 layout: a kernel that writes only rows q*32 + 0..3 of its scale tiles (as nki-library's MX
    kernels do) reads nothing unwritten; leaving one of those rows unwritten is caught."""
    def program(skip_row=None):
        b = ProgramBuilder("mx_rows")
        tiles = []
        for name, dtype in (("s", "uint32"), ("m", "uint32"), ("ss", "uint8"), ("ms", "uint8")):
            h, t = b.hbm(name, (128, 8), dtype), b.sbuf(name + "_sb", (128, 8), dtype)
            if dtype == "uint8":  # only the rows the matmul reads
                for row in scale_rows(128):
                    if row != skip_row:
                        b.emit(Opcode.DMA_COPY, t.ap([[8, 1], [1, 8]], offset=row * 8),
                               [h.ap([[8, 1], [1, 8]])])
            else:
                b.emit(Opcode.DMA_COPY, t, [h])
            tiles.append(t)
        acc = b.psum("acc", (8, 8), "float32")
        b.emit(Opcode.NC_MATMUL_MX, acc, tiles, stationary_fmt=FMT_E4M3FN, moving_fmt=FMT_E4M3FN,
               location="k.py:9")
        return b.build()
    sim.prepare(program(), "trn3", uninitialized_memory="error")
    with pytest.raises(UninitializedReadError, match="k.py:9"):
        sim.prepare(program(skip_row=65), "trn3", uninitialized_memory="error")
