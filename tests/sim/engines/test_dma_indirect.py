"""Indirect DMA (DMA_COPY_INDIRECT): runtime scalar_offset / vector_offset gathers and scatters
(S16 dma_copy "Indirect addressing", S17 nki-aps "Dynamic Access", S18 DGE costs)."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, OutOfBoundsError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip

EXECUTORS = ["numba", "reference"]
ROWS, F, P = 200, 64, 128


def _gather(index_dtype="uint32", *, oob_skip=False, location="k.py:7"):
    """out[p] = table[idx[p]]: partition p's start is idx[p] * F elements (S17 vector access)."""
    b = ProgramBuilder("gather")
    table = b.hbm("table", (ROWS, F), "float32")
    indices = b.hbm("indices", (P, 1), index_dtype)
    idx = b.sbuf("idx", (P, 1), index_dtype)
    rows = b.sbuf("rows", (P, F), "float32")
    out = b.hbm("out", (P, F), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, idx, [indices])
    b.emit(Opcode.DMA_COPY_INDIRECT, rows, [table.ap([[0, P], [1, F]]), idx.ap()], location=location,
           indexed="src", vector=True, stride=F, oob_skip=oob_skip)
    b.emit(Opcode.DMA_COPY, out, [rows])
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_vector_gather_reads_one_row_per_partition(executor):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((ROWS, F)).astype(np.float32)
    idx = rng.integers(0, ROWS, (P, 1)).astype(np.uint32)
    out = sim.run(_gather(), {"table": table, "indices": idx}, executor=executor).outputs["out"]
    np.testing.assert_array_equal(out, table[idx[:, 0]])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_vector_scatter_writes_rows_in_partition_order(executor):
    """dst indexed: partition p lands at row idx[p]; a repeated index keeps the last partition."""
    b = ProgramBuilder("scatter")
    src = b.hbm("src", (P, F), "bfloat16")
    indices = b.hbm("indices", (P, 1), "int32")
    table = b.hbm("table", (ROWS, F), "float32", kind="inout")
    idx = b.sbuf("idx", (P, 1), "int32")
    rows = b.sbuf("rows", (P, F), "bfloat16")
    b.emit(Opcode.DMA_COPY, idx, [indices])
    b.emit(Opcode.DMA_COPY, rows, [src])
    b.emit(Opcode.DMA_COPY_INDIRECT, table.ap([[0, P], [1, F]]), [rows.ap(), idx.ap()],
           indexed="dst", vector=True, stride=F, oob_skip=False)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((P, F)).astype(np.float32)
    import ml_dtypes
    xb = x.astype(ml_dtypes.bfloat16)
    idx_v = rng.integers(0, ROWS, (P, 1)).astype(np.int32)
    idx_v[7] = idx_v[100]  # a duplicate: partition 100 is written last
    t = np.zeros((ROWS, F), np.float32)
    sim.run(b.build(), {"src": xb, "indices": idx_v, "table": t}, executor=executor)
    expect = np.zeros((ROWS, F), np.float32)
    for p in range(P):
        expect[idx_v[p, 0]] = xb[p].astype(np.float32)  # casting copy: bf16 -> fp32
    np.testing.assert_array_equal(t, expect)


def _scalar_program(location="k.py:9"):
    """A[v*512 : v*512 + 128*512][:, :256] with v read from SBUF: indirect_dim=0 of a [512, 512]
    tensor moves the start by v * 512 elements (the S17 example)."""
    b = ProgramBuilder("scalar")
    a = b.hbm("a", (512, 512), "float32")
    v = b.hbm("v", (1, 1), "int32")
    v_sb = b.sbuf("v_sb", (1, 1), "int32")
    out = b.hbm("out", (128, 256), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, v_sb, [v])
    b.emit(Opcode.DMA_COPY_INDIRECT, out, [a.ap([[512, 128], [1, 256]]), v_sb.ap()], location=location,
           indexed="src", vector=False, stride=1, oob_skip=False)
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_scalar_offset_moves_the_whole_access(executor):
    a = np.random.default_rng(2).standard_normal((512, 512)).astype(np.float32)
    out = sim.run(_scalar_program(), {"a": a, "v": np.array([[3 * 128 * 512]], np.int32)},
                  executor=executor).outputs["out"]
    np.testing.assert_array_equal(out, a[384:, :256])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_out_of_bounds_index_raises_before_writing(executor):
    table = np.ones((ROWS, F), np.float32)
    idx = np.arange(P, dtype=np.uint32).reshape(P, 1)
    idx[5] = ROWS  # one past the last row
    with pytest.raises(OutOfBoundsError, match=r"k.py:7.*outside 0..199"):
        sim.run(_gather(), {"table": table, "indices": idx}, executor=executor)
    with pytest.raises(OutOfBoundsError, match="k.py:9"):
        sim.run(_scalar_program(), {"a": np.zeros((512, 512), np.float32), "v": np.array([[-1]], np.int32)},
                executor=executor)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_oob_skip_leaves_the_partition_untouched(executor):
    """oob_mode.skip (S16): an out-of-bounds index skips its partition's transfer."""
    table = np.arange(ROWS * F, dtype=np.float32).reshape(ROWS, F)
    idx = np.arange(P, dtype=np.uint32).reshape(P, 1)
    idx[5] = 10_000
    out = sim.run(_gather(oob_skip=True), {"table": table, "indices": idx}, executor=executor,
                  uninitialized_memory="zero").outputs["out"]
    np.testing.assert_array_equal(np.delete(out, 5, axis=0), np.delete(table[:P], 5, axis=0))
    np.testing.assert_array_equal(out[5], 0.0)


def test_descriptors_are_made_at_run_time():
    """S18: a vector_offset gather needs software DGE (descriptors made on GpSimd), a scalar offset
    hardware DGE; the trigger occupies that engine (``dma.trigger``)."""
    from neuronsim.sim.engines.dma import trigger
    from neuronsim.sim.ir import Engine
    chip = get_chip("trn2")
    b = ProgramBuilder()
    table, idx = b.hbm("table", (ROWS, F), "float32"), b.sbuf("idx", (P, 1), "uint32")
    rows = b.sbuf("rows", (P, F), "float32")
    for vector, engine in ((True, Engine.GPSIMD), (False, Engine.SYNC)):
        ins = b.emit(Opcode.DMA_COPY_INDIRECT, rows, [table.ap([[0, P], [1, F]]), idx.ap()], indexed="src",
                     vector=vector, stride=F, oob_skip=False, dge="swdge" if vector else "hwdge")
        assert trigger(ins, chip)[0] is engine


def test_schedule_orders_the_indirect_side_against_its_whole_tensor():
    """The scattered rows are known only at run time: a later read of any row waits for it."""
    b = ProgramBuilder()
    table = b.hbm("table", (ROWS, F), "float32", kind="inout")
    idx = b.sbuf("idx", (P, 1), "uint32")
    rows = b.sbuf("rows", (P, F), "float32")
    back = b.sbuf("back", (1, F), "float32")
    b.emit(Opcode.MEMSET, idx, value=0.0)
    b.emit(Opcode.MEMSET, rows, value=1.0)
    b.emit(Opcode.DMA_COPY_INDIRECT, table.ap([[0, P], [1, F]]), [rows.ap(), idx.ap()], queue=0,
           indexed="dst", vector=True, stride=F, oob_skip=False)
    b.emit(Opcode.DMA_COPY, back, [table.ap([[F, 1], [1, F]], offset=(ROWS - 1) * F)], queue=1)
    tl = sim.prepare(b.build()).timeline
    assert tl.start_ns[3] >= tl.end_ns[2]


@pytest.mark.parametrize("change, error, match", [
    ({"indexed": "dst"}, ConstraintError, "must be in HBM"),  # dst is SBUF here
    ({"stride": 0}, ConstraintError, "stride 0"),
])
def test_validator_rules(change, error, match):
    b = ProgramBuilder()
    table = b.hbm("table", (ROWS, F), "float32")
    idx = b.sbuf("idx", (P, 1), "uint32")
    rows = b.sbuf("rows", (P, F), "float32")
    imm = {"indexed": "src", "vector": True, "stride": F, "oob_skip": False, **change}
    b.emit(Opcode.DMA_COPY_INDIRECT, rows, [table.ap([[0, P], [1, F]]), idx.ap()], location="k.py:4", **imm)
    with pytest.raises(error, match=f"k.py:4.*{match}"):
        sim.prepare(b.build())


def test_offsets_must_be_integers_and_one_per_partition():
    for shape, dtype, error, match in (((P, 1), "float32", DtypeError, "index dtype"),
                                       ((64, 1), "uint32", ConstraintError, r"must be \[128, 1\]")):
        b = ProgramBuilder()
        table = b.hbm("table", (ROWS, F), "float32")
        idx = b.sbuf("idx", shape, dtype)
        rows = b.sbuf("rows", (P, F), "float32")
        b.emit(Opcode.DMA_COPY_INDIRECT, rows, [table.ap([[0, P], [1, F]]), idx.ap()], location="k.py:5",
               indexed="src", vector=True, stride=F, oob_skip=False)
        with pytest.raises(error, match=f"k.py:5.*{match}"):
            sim.prepare(b.build())
