"""Generic validator rules (sim/validate.py, memory/layout.py): one test per rule, each naming
the instruction and the kernel location in its error."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import (
    ConstraintError,
    EngineAccessError,
    InputError,
    OutOfBoundsError,
    PsumCapacityError,
    SbufCapacityError,
    UninitializedReadError,
)
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip

LOC = "kernel.py:42"


def _prepare(b, **kw):
    return sim.prepare(b.build(), "trn2", **kw)


def test_sbuf_over_capacity_names_tensor_size_limit_and_line():
    b = ProgramBuilder()
    limit = get_chip("trn2").sbuf_bytes_per_partition
    b.sbuf("huge", (128, limit // 4 + 1), "float32", location=LOC)
    with pytest.raises(SbufCapacityError) as err:
        _prepare(b)
    msg = str(err.value)
    assert "huge" in msg and str(limit) in msg and str(limit + 4 - limit % 4) in msg and LOC in msg


def test_psum_over_capacity():
    b = ProgramBuilder()
    for i in range(9):  # 9 x 2 KiB banks > 8 banks
        b.psum(f"acc{i}", (128, 512), "float32", location=LOC)
    with pytest.raises(PsumCapacityError, match=f"{LOC}.*acc8.*16384"):
        _prepare(b)


def test_more_than_128_partitions():
    b = ProgramBuilder()
    b.sbuf("tall", (129, 4), "float32", location=LOC)
    with pytest.raises(ConstraintError, match="129 partitions; the limit is 128"):
        _prepare(b)


def test_hbm_access_out_of_bounds():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 64), "float32")
    s = b.sbuf("s", (128, 64), "float32")
    b.emit(Opcode.DMA_COPY, s, [a.ap([[64, 128], [1, 64]], offset=1)], location=LOC)
    with pytest.raises(OutOfBoundsError, match=f"{LOC}: dma_copy on dma: .*elements 1..8192"):
        _prepare(b)


def test_sbuf_free_dim_out_of_bounds():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 64), "float32")
    s = b.sbuf("s", (128, 32), "float32")
    b.emit(Opcode.DMA_COPY, s.ap([[32, 128], [1, 64]]), [a], location=LOC)
    with pytest.raises(OutOfBoundsError, match="free elements 0..63 .* 32 per partition"):
        _prepare(b)


def test_sbuf_partition_out_of_bounds():
    b = ProgramBuilder()
    a = b.hbm("a", (64, 8), "float32")
    s = b.sbuf("s", (32, 8), "float32")
    b.emit(Opcode.DMA_COPY, s.ap([[8, 64], [1, 8]]), [a], location=LOC)
    with pytest.raises(OutOfBoundsError, match="partitions 0..63"):
        _prepare(b)


def test_partition_step_must_equal_free_size():
    b = ProgramBuilder()
    a = b.hbm("a", (64, 8), "float32")
    s = b.sbuf("s", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, s.ap([[16, 64], [1, 8]]), [a], location=LOC)
    with pytest.raises(ConstraintError, match="partition step must equal the tensor's free size 8"):
        _prepare(b)


def test_dma_cannot_touch_psum():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 8), "float32")
    p = b.psum("p", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, p, [a], location=LOC)
    with pytest.raises(EngineAccessError, match="dma engine cannot write PSUM"):
        _prepare(b)


def test_engine_not_allowed_for_opcode():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 8), "float32")
    s = b.sbuf("s", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, s, [a], engine=sim.Engine.VECTOR, location=LOC)
    with pytest.raises(ConstraintError, match="cannot run on vector; allowed engines: dma"):
        _prepare(b)


def test_dma_queue_must_exist():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 8), "float32")
    s = b.sbuf("s", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, s, [a], queue=16, location=LOC)
    with pytest.raises(ConstraintError, match="DMA queue 16 does not exist"):
        _prepare(b)


def test_uninitialized_read_is_reported_when_asked():
    b = ProgramBuilder()
    s = b.sbuf("s", (128, 8), "float32")
    o = b.hbm("o", (128, 8), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, o, [s], location=LOC)
    program = b.build()
    with pytest.raises(UninitializedReadError, match=f"{LOC}.*before anything wrote"):
        sim.prepare(program, "trn2", uninitialized_memory="error")
    out = sim.run(program, {}, "trn2", uninitialized_memory="nan").outputs["o"]
    assert np.isnan(out).all()  # the NaN fill exposes the read


def test_foreign_tensor_is_rejected():
    other = ProgramBuilder().sbuf("x", (128, 8), "float32")
    b = ProgramBuilder()
    a = b.hbm("a", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, other, [a], location=LOC)
    with pytest.raises(ConstraintError):
        _prepare(b)


def test_input_arrays_are_checked_before_running():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 8), "float32")
    s = b.sbuf("s", (128, 8), "float32")
    b.emit(Opcode.DMA_COPY, s, [a])
    program = b.build()
    with pytest.raises(InputError, match="dtype is float64"):
        sim.run(program, {"a": np.zeros((128, 8))})
    with pytest.raises(InputError, match="expected 1024 elements"):
        sim.run(program, {"a": np.zeros((8, 8), np.float32)})
    with pytest.raises(InputError, match="C-contiguous"):
        sim.run(program, {"a": np.zeros((8, 256), np.float32)[:, ::2]})
    with pytest.raises(InputError, match="no array given for input"):
        sim.run(program, {})
