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
    program = _roundtrip((128, 64), "float32", "float32", "float32")
    out = sim.run(program, {"a": x}, executor=executor).outputs["o"]
    assert np.array_equal(out.view(np.uint32), bits)
    ints = rng.integers(-2**31, 2**31, size=(128, 64), dtype=np.int32)
    program = _roundtrip((128, 64), "int32", "int32", "int32")
    out = sim.run(program, {"a": ints}, executor=executor).outputs["o"]
    assert np.array_equal(out, ints)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_casting_copy_rounds_to_nearest_even(executor):
    """DMA casts src -> fp32 -> dst (S9), rounding to nearest even on the write."""
    x = np.random.default_rng(1).standard_normal((128, 32)).astype(np.float32)
    program = _roundtrip((128, 32), "float32", "bfloat16", "float32")
    out = sim.run(program, {"a": x}, executor=executor).outputs["o"]
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


TRN2 = get_chip("trn2")


def _transfers(shapes, dtype="float32", queues=None, hbm_cols=None, store=False, **imm):
    """A Program of loads (or stores) of [P, F] tiles, each into its own SBUF tensor; ``hbm_cols``
    makes the HBM side a [P, F] window of a wider [P, hbm_cols] matrix."""
    b = ProgramBuilder("dma")
    for k, (p, f) in enumerate(shapes):
        cols = hbm_cols or f
        h = b.hbm(f"h{k}", (p, cols), dtype, kind="output" if store else "input")
        t = b.sbuf(f"t{k}", (p, f), dtype)
        hbm_ap = h.ap([[cols, p], [1, f]])
        dst, src = (hbm_ap, t) if store else (t, hbm_ap)
        b.emit(Opcode.DMA_COPY, dst, [src], queue=0 if queues is None else queues[k], **imm)
    return sim.prepare(b.build(), "trn2", uninitialized_memory="zero").timeline


def test_lone_load_matches_the_dma_overview_profile():
    """S14 figures 5-7 (Trn2, [128,128] bf16 HBM->SBUF): 16 engines of 2 KiB each, started one
    after another from 739 ns after the trigger, 468 ns from first to last packet, 1207 ns from
    trigger to done."""
    tl = _transfers([(128, 128)], "bfloat16")
    piece = 2048 / 23.0
    assert tl.dma_engine_count[0] == 16 and tl.dma_piece_ns[0] == pytest.approx(piece)
    assert tl.start_ns[0] == pytest.approx(TRN2.dma_read_latency_ns)
    assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(15 * TRN2.dma_read_engine_stagger_ns + piece)
    assert tl.done_ns[0] - tl.issue_ns[0] == pytest.approx(1207, abs=3)


def test_lone_store_uses_the_write_latency():
    """S14 figure 5: the [128,128] bf16 store starts 614 ns after its trigger, its pieces span 243 ns."""
    tl = _transfers([(128, 128)], "bfloat16", store=True)
    assert tl.start_ns[0] == pytest.approx(TRN2.dma_write_latency_ns)
    assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(243, abs=2)


def test_single_engine_transfer_matches_the_measurement():
    """S14 figure 3: one engine moves [4, 4096] bf16 (32 KiB) HBM->SBUF in 1416 ns (~23 B/ns); it
    is started after the 15 engines without data."""
    tl = _transfers([(4, 4096)], "bfloat16")
    assert tl.dma_engine_count[0] == 1
    assert tl.end_ns[0] - tl.start_ns[0] == pytest.approx(32768 / 23.0)
    assert tl.start_ns[0] == pytest.approx(TRN2.dma_read_latency_ns + 15 * TRN2.dma_read_engine_stagger_ns)


def test_fewer_partitions_use_fewer_engines():
    """S15: each engine serves 8 partitions; 16 partitions use 2 engines."""
    tl = _transfers([(16, 8192)])
    assert tl.dma_engine_count[0] == 2
    assert tl.dma_piece_ns[0] == pytest.approx(8 * 8192 * 4 / 23.0)


def test_short_hbm_rows_are_packet_rate_bound():
    """S15: small contiguous payloads are bound by the packet rate: each run of HBM bytes costs at
    least dma_hbm_run_min_ns. A [128,128] fp32 tile of a wider matrix is 8 runs of 512 B per engine;
    the same tile stored contiguously is one 4 KiB run."""
    window = _transfers([(128, 128)], hbm_cols=4096)
    whole = _transfers([(128, 128)])
    assert window.dma_piece_ns[0] == pytest.approx(8 * TRN2.dma_hbm_run_min_ns)
    assert whole.dma_piece_ns[0] == pytest.approx(4096 / 23.0)


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_one_queue_throughput_has_the_documented_shape(chip):
    """S14's size/throughput figure: one queue starts a transfer at most every
    dma_queue_issue_interval_ns (~840 ns), so below ~2 KiB per partition throughput is that constant
    rate; from 4 KiB on the engines' bandwidth bounds it (>= 95% of 16 x per-engine peak)."""
    spec = get_chip(chip)
    efficiency = {}
    for bpp in (64, 256, 1024, 2048, 4096, 8192):
        b = ProgramBuilder("sweep")
        n = 6
        for k in range(n):
            h = b.hbm(f"h{k}", (128, bpp // 4), "float32")
            b.emit(Opcode.DMA_COPY, b.sbuf(f"t{k}", (128, bpp // 4), "float32"), [h], queue=0)
        tl = sim.prepare(b.build(), chip, uninitialized_memory="zero").timeline
        spacing = (tl.start_ns[-1] - tl.start_ns[1]) / (n - 2)  # steady state
        efficiency[bpp] = 128 * bpp / (spacing * 1e-9) / spec.dma_peak_bandwidth_bytes_per_s
        if bpp <= 1024:
            assert spacing == pytest.approx(spec.dma_queue_issue_interval_ns), bpp
    assert efficiency[64] < 0.05
    assert efficiency[4096] >= 0.95 and efficiency[8192] == pytest.approx(1.0)
    assert efficiency[1024] < efficiency[2048] < efficiency[4096]


def test_queues_overlap_and_engines_serve_one_transfer_at_a_time():
    """Queues trigger independently; an engine moves one piece at a time; one queue triggers in
    order, at most every dma_queue_issue_interval_ns."""
    def program(queues, partitions_start):
        b = ProgramBuilder()
        a = b.hbm("a", (128, 4096), "float32")
        s = b.sbuf("s", (128, 4096), "float32")
        for q, p0 in zip(queues, partitions_start, strict=True):
            b.emit(Opcode.DMA_COPY, s.ap([[4096, 64], [1, 4096]], offset=p0 * 4096),
                   [a.ap([[4096, 64], [1, 4096]], offset=p0 * 4096)], queue=q)
        return sim.prepare(b.build()).timeline
    piece = 8 * 4096 * 4 / 23.0
    two_queues = program([0, 1], [0, 64])  # engines 0-7 and 8-15, at once
    assert two_queues.issue_ns[1] == 0.0
    assert two_queues.start_ns[1] < two_queues.end_ns[0]
    one_queue = program([0, 0], [0, 64])
    assert one_queue.issue_ns[1] == pytest.approx(TRN2.dma_queue_issue_interval_ns)
    same_engines = program([0, 1], [0, 0])  # WAW on the same bytes: the second waits for the first
    assert same_engines.issue_ns[1] == pytest.approx(same_engines.done_ns[0])
    spread = same_engines.end_ns[0] - same_engines.start_ns[0]
    assert spread == pytest.approx(piece + 7 * TRN2.dma_read_engine_stagger_ns)


def test_hardware_dge_trigger_occupies_the_issuing_engine():
    """S18: a hardware-DGE DMA instruction takes ~600 ns on the Scalar or Sync engine that triggers
    it; software DGE runs its trigger on GpSimd; host-built descriptors cost no engine time."""
    from neuronsim.sim.ir import Engine

    for imm, engine, ns in ((dict(dge="hwdge", trigger=Engine.SCALAR), Engine.SCALAR, 600.0),
                            (dict(dge="hwdge"), Engine.SYNC, 600.0),
                            (dict(dge="swdge"), Engine.GPSIMD, TRN2.dma_swdge_issue_ns)):
        tl = _transfers([(128, 128)], "bfloat16", **imm)
        assert tl.pre_track[0] == int(engine)
        assert tl.pre_done_ns[0] - tl.pre_start_ns[0] == pytest.approx(ns)
        assert tl.start_ns[0] == pytest.approx(ns + TRN2.dma_read_latency_ns)
    assert _transfers([(128, 128)], "bfloat16", dge="none").pre_track[0] == -1


def test_a_trigger_engine_must_match_the_dge_mode():
    from neuronsim.errors import ConstraintError
    from neuronsim.sim.ir import Engine

    with pytest.raises(ConstraintError, match="cannot be triggered by gpsimd"):
        _transfers([(128, 128)], "bfloat16", dge="hwdge", trigger=Engine.GPSIMD)
    with pytest.raises(ConstraintError, match="dge mode 'fast'"):
        _transfers([(128, 128)], "bfloat16", dge="fast")
