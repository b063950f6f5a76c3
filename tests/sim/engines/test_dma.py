"""DMA engine: dma_copy / dma_transpose semantics and the transfer cost model (S14, S15)."""

import ml_dtypes
import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip

EXECUTORS = ["numba", "reference"]


def _roundtrip(shape, src_dtype, mid_dtype, dst_dtype):
    b = ProgramBuilder("roundtrip")
    a = b.hbm("a", shape, src_dtype)
    s = b.sbuf("s", shape, mid_dtype)
    o = b.hbm("o", shape, dst_dtype, kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.DMA_COPY, o, [s])
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_same_dtype_copy_is_bit_exact(executor):
    """dma_copy with equal dtypes moves bits (NaN payloads and large ints survive)."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=(128, 64), dtype=np.uint32)
    x = bits.view(np.float32)
    out = sim.run(_roundtrip((128, 64), "float32", "float32", "float32"), {"a": x}, executor=executor).outputs["o"]
    assert np.array_equal(out.view(np.uint32), bits)
    ints = rng.integers(-2**31, 2**31, size=(128, 64), dtype=np.int32)
    out = sim.run(_roundtrip((128, 64), "int32", "int32", "int32"), {"a": ints}, executor=executor).outputs["o"]
    assert np.array_equal(out, ints)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_casting_copy_rounds_to_nearest_even(executor):
    """DMA casts src -> fp32 -> dst (S9), rounding to nearest even on the write."""
    x = np.random.default_rng(1).standard_normal((128, 32)).astype(np.float32)
    out = sim.run(_roundtrip((128, 32), "float32", "bfloat16", "float32"), {"a": x}, executor=executor).outputs["o"]
    assert np.array_equal(out, x.astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_strided_and_broadcast_loads(executor):
    """Access patterns: a transposing HBM read and a partition-broadcast (step 0) read."""
    b = ProgramBuilder()
    a = b.hbm("a", (16, 8), "float32")
    s = b.sbuf("s", (8, 16), "float32")
    t = b.sbuf("t", (32, 8), "float32")
    o1 = b.hbm("o1", (8, 16), "float32", kind="output")
    o2 = b.hbm("o2", (32, 8), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a.ap([[1, 8], [8, 16]])])  # column-major read = transpose
    b.emit(Opcode.DMA_COPY, t, [a.ap([[0, 32], [1, 8]])])  # row 0 to every partition
    b.emit(Opcode.DMA_COPY, o1, [s])
    b.emit(Opcode.DMA_COPY, o2, [t])
    x = np.arange(128, dtype=np.float32).reshape(16, 8)
    out = sim.run(b.build(), {"a": x}, executor=executor).outputs
    assert np.array_equal(out["o1"], x.T)
    assert np.array_equal(out["o2"], np.broadcast_to(x[0], (32, 8)))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_dma_transpose(executor):
    b = ProgramBuilder()
    a = b.hbm("a", (32, 128), "bfloat16")
    s = b.sbuf("s", (128, 32), "bfloat16")
    o = b.hbm("o", (128, 32), "bfloat16", kind="output")
    b.emit(Opcode.DMA_TRANSPOSE, s, [a])
    b.emit(Opcode.DMA_COPY, o, [s])
    x = np.random.default_rng(2).standard_normal((32, 128)).astype(ml_dtypes.bfloat16)
    out = sim.run(b.build(), {"a": x}, executor=executor).outputs["o"]
    assert np.array_equal(out.view(np.uint16), x.T.view(np.uint16))


def test_dma_transpose_needs_matching_2_or_4_byte_dtypes():
    b = ProgramBuilder()
    a = b.hbm("a", (32, 128), "float8_e4m3")
    s = b.sbuf("s", (128, 32), "float8_e4m3")
    b.emit(Opcode.DMA_TRANSPOSE, s, [a], location="k.py:3")
    with pytest.raises(DtypeError, match="k.py:3.*2- or 4-byte"):
        sim.prepare(b.build())


def _load_time_ns(bytes_per_partition, chip="trn2", partitions=128):
    b = ProgramBuilder()
    n = bytes_per_partition // 4
    a = b.hbm("a", (partitions, n), "float32")
    s = b.sbuf("s", (partitions, n), "float32")
    b.emit(Opcode.DMA_COPY, s, [a])
    return sim.prepare(b.build(), chip).timeline.total_ns


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_dma_sweep_has_the_documented_shape(chip):
    """S14/S15: t = max(fixed, bytes_per_engine / BW): fixed-cost bound below ~2 KiB per
    partition, >= 95% of peak from 4 KiB on, peak = per-engine bandwidth x 16 engines."""
    spec = get_chip(chip)
    peak = spec.dma_peak_bandwidth_bytes_per_s
    efficiency = {}
    for bpp in [64 * 2**i for i in range(11)]:  # 64 B .. 64 KiB per partition
        t = _load_time_ns(bpp, chip)
        efficiency[bpp] = 128 * bpp / (t * 1e-9) / peak
        if bpp < 2048:
            assert t == pytest.approx(spec.dma_fixed_cost_ns), bpp
    assert efficiency[64] < 0.05
    assert all(efficiency[bpp] >= 0.95 for bpp in efficiency if bpp >= 4096)
    assert efficiency[65536] == pytest.approx(1.0)
    assert efficiency[1024] < efficiency[2048] < efficiency[4096]


def test_single_engine_transfer_matches_the_measurement():
    """S14: one engine moving 32 KiB HBM->SBUF takes 1416 ns at 23 B/ns."""
    t = _load_time_ns(32768 // 8, "trn2", partitions=8)
    assert t == pytest.approx(32768 / 23.0, rel=0.01)


def test_fewer_partitions_use_fewer_engines():
    """S15: each engine serves 8 partitions; 16 partitions use 2 engines."""
    b = ProgramBuilder()
    a = b.hbm("a", (16, 8192), "float32")
    s = b.sbuf("s", (16, 8192), "float32")
    b.emit(Opcode.DMA_COPY, s, [a])
    tl = sim.prepare(b.build()).timeline
    assert tl.dma_engine_count[0] == 2
    assert tl.total_ns == pytest.approx(8 * 8192 * 4 / 23.0)


def test_queues_overlap_only_when_engines_are_free():
    """Transfers on one queue run in order; on different queues they still share the engines."""
    def program(queues, partitions_start):
        b = ProgramBuilder()
        a = b.hbm("a", (128, 4096), "float32")
        s = b.sbuf("s", (128, 4096), "float32")
        for q, p0 in zip(queues, partitions_start):
            b.emit(Opcode.DMA_COPY, s.ap([[4096, 64], [1, 4096]], offset=p0 * 4096),
                   [a.ap([[4096, 64], [1, 4096]], offset=p0 * 4096)], queue=q)
        return sim.prepare(b.build()).timeline
    one = 8 * 4096 * 4 / 23.0
    same_queue_disjoint = program([0, 0], [0, 64])
    assert same_queue_disjoint.total_ns == pytest.approx(2 * one)  # in order on one queue
    two_queues = program([0, 1], [0, 64])
    assert two_queues.total_ns == pytest.approx(one)  # engines 0-7 and 8-15 in parallel
    two_queues_same_half = program([0, 1], [0, 0])
    assert two_queues_same_half.total_ns == pytest.approx(2 * one)  # WAW on the same bytes
