"""GpSimd gathers (sim/engines/gpsimd_gather.py): nc_n_gather and nonzero_with_count on both
executors, their assumed cost formulas, the run-time index check and every static check."""

import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, OneOp, cycles, registered_opcodes, rejects, run_one

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, OutOfBoundsError, UninitializedReadError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import gpsimd_gather


@pytest.mark.parametrize("executor", EXECUTORS)
def test_n_gather_takes_flattened_elements_per_partition_bit_for_bit(executor):
    """S16: dst[p, k] = data[p, indices[p, k]], data's free dims flattened; repeats allowed."""
    rng = np.random.default_rng(5)
    data = rng.integers(-2**31, 2**31 - 1, (64, 4, 50), dtype=np.int64).astype(np.int32)
    idx = rng.integers(0, 200, (64, 30)).astype(np.uint32)
    idx[0, :3] = [199, 199, 0]
    k = OneOp()
    d, i = k.load("d", data), k.load("i", idx)
    out = k.result("out", (64, 30), "int32")
    k.emit(Opcode.NC_N_GATHER, out, [d, i])
    got = k.run(executor)["out"]
    assert np.array_equal(got, np.take_along_axis(data.reshape(64, 200), idx.astype(np.int64), axis=1))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_index_out_of_range_is_an_error_with_the_line(executor):
    k = OneOp()
    d = k.load("d", np.zeros((4, 16), np.float32))
    i = k.load("i", np.full((4, 2), 16, np.uint32))
    k.emit(Opcode.NC_N_GATHER, k.result("out", (4, 2)), [d, i])
    with pytest.raises(OutOfBoundsError, match=r"kernel.py:7: nc_n_gather.*outside 0\.\.15"):
        sim.run(k.build(), k.inputs, executor=executor)


def test_n_gather_cost_and_checks():
    """Assumed: ceil(N_data / 512) * GPSIMD_START + N_out; dst keeps data's dtype; uint32 indices."""
    b = ProgramBuilder()
    d, i = b.sbuf("d", (128, 1200), "float32"), b.sbuf("i", (128, 64), "uint32")
    out = b.sbuf("o", (128, 64), "float32")
    assert cycles(b.emit(Opcode.NC_N_GATHER, out, [d, i])) == 3 * CHIP.gpsimd_start_cycles + 64

    def emit(k, dst_dtype="float32", idx_dtype="uint32", dst_free=8):
        data = k.load("d", np.zeros((4, 32), np.float32))
        idx = k.load("i", np.zeros((4, 8), idx_dtype))
        k.emit(Opcode.NC_N_GATHER, k.result("y", (4, dst_free), dst_dtype), [data, idx])
    rejects(lambda k: emit(k, dst_dtype="bfloat16"), DtypeError, "dst is bfloat16 but data is float32")
    rejects(lambda k: emit(k, idx_dtype="int32"), DtypeError, "indices are int32; nc_n_gather takes uint32")
    rejects(lambda k: emit(k, dst_free=4), ConstraintError,
            "indices have 8 elements per partition but dst has 4")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_nonzero_with_count_lists_positions_on_each_gpsimd_cores_first_partition(executor):
    """S16: on partitions 0, 16, ..., 112 dst = [i + index_offset for nonzero x[i]], padding_val up to
    T, then the count; -0.0 is zero, NaN is not; every other dst partition keeps its contents."""
    rng = np.random.default_rng(3)
    x = np.where(rng.random((48, 2, 5)) < 0.4, rng.standard_normal((48, 2, 5)), 0).astype(np.float32)
    x[0] = 0
    x[16, 0] = [np.nan, -0.0, 1.0, 2.0, 0.0]
    before = np.full((48, 11), 77, np.int32)
    k = OneOp()
    src = k.load("x", x)
    out = k.load("out", before)
    k.results.append(out)
    k.emit(Opcode.NONZERO_WITH_COUNT, out, [src], index_offset=100, padding_val=-5)
    got = k.run(executor)["out"]
    want = before.copy()
    for p in (0, 16, 32):
        found = np.flatnonzero(x[p].reshape(-1) != 0) + 100
        want[p] = np.concatenate([found, np.full(10 - found.size, -5), [found.size]])
    assert np.array_equal(got, want)
    assert list(got[16, :3]) == [100, 102, 103]  # NaN at 0 counts, -0.0 at 1 does not
    assert list(got[0]) == [-5] * 10 + [0]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_nonzero_with_count_on_int32_on_one_partition(executor):
    x = np.array([[0, 1, 1, 0, 0, 1, 0, 0]], np.int32)  # the ISA docs' example
    got = run_one(Opcode.NONZERO_WITH_COUNT, (1, 9), "int32", [x], executor, index_offset=16, padding_val=-1)
    assert list(got[0]) == [17, 18, 21, -1, -1, -1, -1, -1, 3]


def test_nonzero_with_count_cost_and_checks():
    """Assumed: GPSIMD_START + T + 1; float32/int32 src, int32 dst with one more element, int32 values."""
    b = ProgramBuilder()
    s, d = b.sbuf("s", (128, 4, 256), "float32"), b.sbuf("d", (128, 1025), "int32")
    assert cycles(b.emit(Opcode.NONZERO_WITH_COUNT, d, [s])) == CHIP.gpsimd_start_cycles + 1025

    def emit(k, src_dtype="int32", dst_dtype="int32", dst_free=9, **imm):
        src = k.load("s", np.zeros((4, 8), src_dtype))
        k.emit(Opcode.NONZERO_WITH_COUNT, k.result("y", (4, dst_free), dst_dtype), [src], **imm)
    rejects(lambda k: emit(k, src_dtype="bfloat16"), DtypeError, "src is bfloat16; nonzero_with_count reads")
    rejects(lambda k: emit(k, dst_dtype="uint32"), DtypeError, "dst is uint32; nonzero_with_count writes")
    rejects(lambda k: emit(k, dst_free=8), ConstraintError, "it must have src's 8 plus one for the count")
    rejects(lambda k: emit(k, padding_val=2**31), ConstraintError, "padding_val=2147483648 must be an int32")
    rejects(lambda k: emit(k, index_offset=2**31 - 4), ConstraintError, "last index at 2147483651")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_local_gather_uses_each_cores_indices_partition_first(executor):
    """S16: core c's indices are its 16 partitions' index elements flattened partition first (the SDK's
    numpy semantics use flatten(order='F')); each of its partitions takes n elements at each, bit
    for bit."""
    rng = np.random.default_rng(6)
    src = rng.integers(-2**31, 2**31 - 1, (32, 40), dtype=np.int64).astype(np.int32)
    index = rng.integers(0, 38, (32, 3)).astype(np.uint16)
    k = OneOp()
    s, i = k.load("s", src), k.load("i", index)
    out = k.result("out", (32, 40 * 2), "int32")  # 40 indices of 2 elements
    k.emit(Opcode.LOCAL_GATHER, out, [s, i], num_elem_per_idx=2, num_valid_indices=40)
    got = k.run(executor)["out"]
    for core in range(2):
        rows = slice(core * 16, (core + 1) * 16)
        starts = index[rows].flatten(order="F")[:40].astype(np.int64)
        cols = (starts[:, None] + np.arange(2)).reshape(-1)
        assert np.array_equal(got[rows], src[rows][:, cols])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_local_gather_past_src_is_an_error_with_the_line(executor):
    k = OneOp()
    s = k.load("s", np.zeros((16, 8), np.float32))
    i = k.load("i", np.full((16, 1), 7, np.uint16))
    k.emit(Opcode.LOCAL_GATHER, k.result("out", (16, 32)), [s, i], num_elem_per_idx=2, num_valid_indices=16)
    with pytest.raises(OutOfBoundsError, match=r"kernel.py:7: local_gather.*reaches past the 8 elements"):
        sim.run(k.build(), k.inputs, executor=executor)


def test_local_gather_cost_and_checks():
    """Assumed: GPSIMD_START + K * n; uint16 indices; partitions a multiple of 16; n a power of 2 to 32."""
    b = ProgramBuilder()
    s, i = b.sbuf("s", (128, 64), "float32"), b.sbuf("i", (128, 16), "uint16")
    o = b.sbuf("o", (128, 256), "float32")
    assert cycles(b.emit(Opcode.LOCAL_GATHER, o, [s, i], num_elem_per_idx=1, num_valid_indices=256)) == \
        CHIP.gpsimd_start_cycles + 256

    def emit(k, parts=16, idx_dtype="uint16", n=1, valid=16, dst_free=16):
        src = k.load("s", np.zeros((parts, 32), np.float32))
        idx = k.load("i", np.zeros((parts, 1), idx_dtype))
        k.emit(Opcode.LOCAL_GATHER, k.result("y", (parts, dst_free)), [src, idx], num_elem_per_idx=n,
               num_valid_indices=valid)
    rejects(lambda k: emit(k, idx_dtype="int32"), DtypeError, "index is int32; local_gather takes uint16")
    rejects(lambda k: emit(k, parts=8), ConstraintError, "needs a multiple of 16")
    rejects(lambda k: emit(k, n=3, dst_free=48), ConstraintError, r"num_elem_per_idx=3; one of \(1, 2, 4")
    rejects(lambda k: emit(k, valid=17, dst_free=17), ConstraintError, "num_valid_indices=17; 1 to min")
    rejects(lambda k: emit(k, dst_free=8), ConstraintError, "num_valid_indices \\* num_elem_per_idx = 16")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(gpsimd_gather) == {Opcode.NC_N_GATHER, Opcode.NONZERO_WITH_COUNT,
                                                 Opcode.LOCAL_GATHER}


def test_nonzero_with_count_touches_only_each_cores_first_partition_for_the_uninitialized_check():
    """A fresh dst (nothing written) is not read, and src matters only on partitions 0, 16, ...;
    reading a dst partition the instruction left alone is still caught."""
    b = ProgramBuilder()
    h = b.hbm("h", (1, 8), "int32")
    s, d = b.sbuf("s", (32, 8), "int32"), b.sbuf("d", (32, 9), "int32")
    for p in (0, 16):
        b.emit(Opcode.DMA_COPY, s.ap([[8, 1], [1, 8]], offset=p * 8), [h])
    b.emit(Opcode.NONZERO_WITH_COUNT, d, [s], location="kernel.py:3")
    out = b.hbm("o", (1, 9), "int32", kind="output")
    b.emit(Opcode.DMA_COPY, out, [d.ap([[9, 1], [1, 9]], offset=16 * 9)])
    sim.prepare(b.build(), CHIP, uninitialized_memory="error")
    b.emit(Opcode.DMA_COPY, out, [d.ap([[9, 1], [1, 9]], offset=9)], location="kernel.py:5")
    with pytest.raises(UninitializedReadError, match="kernel.py:5"):
        sim.prepare(b.build(), CHIP, uninitialized_memory="error")
