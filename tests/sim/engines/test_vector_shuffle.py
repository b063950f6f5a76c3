"""VectorE cross-partition shuffle (sim/engines/vector_shuffle.py): nc_stream_shuffle — values on both
executors, the documented cost formula (S23) and every check."""

import numpy as np
import pytest
from reduce_cases import EXECUTORS, OneOp, cycles, registered_opcodes, rejects

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import vector_shuffle

ROTATE = tuple((i - 1) % 32 for i in range(32))  # the SDK example: partition i takes i - 1


def shuffle_ref(dst, src, mask):
    """dst[q*32 + i] = src[q*32 + mask[i]] unless mask[i] == 255 (S16)."""
    out = dst.copy()
    for i in range(dst.shape[0]):
        m = mask[i % 32]
        if m != 255:
            out[i] = src[(i // 32) * 32 + m]
    return out


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rotation_applies_per_quadrant_bit_for_bit(executor):
    """128 partitions: the one mask applies to each quadrant; NaN payloads and -0.0 move as bits."""
    x = np.random.default_rng(1).standard_normal((128, 40)).astype(np.float32)
    x.view(np.uint32)[5, 3] = 0x7FC01234  # a NaN payload
    x[70, 0] = -0.0
    k = OneOp()
    src, out = k.load("x", x), k.result("out", (128, 40))
    k.emit(Opcode.NC_STREAM_SHUFFLE, out, [src], mask=ROTATE)
    got = k.run(executor)["out"]
    want = shuffle_ref(np.zeros_like(x), x, ROTATE)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_broadcast_one_partition_and_keep_entries(executor):
    """A [1, F] src broadcast to 32 partitions (mask of zeros); 255 leaves dst partitions as they were;
    in place (dst = src) reads src whole first."""
    x = np.arange(1 * 16, dtype=np.float32).reshape(1, 16) + 7
    old = np.full((32, 16), -3, np.int32)
    k = OneOp()
    src = k.load("x", x)
    bcast = k.result("bcast", (32, 16))
    k.emit(Opcode.NC_STREAM_SHUFFLE, bcast, [src], mask=(0,) * 32)
    kept = k.load("kept", old)
    kept_src = k.load("kept_src", np.arange(32 * 16, dtype=np.int32).reshape(32, 16))
    keep_mask = tuple(255 if i % 3 else 31 - i for i in range(32))
    k.emit(Opcode.NC_STREAM_SHUFFLE, kept, [kept_src], mask=keep_mask)
    k.results.append(kept)
    rot = k.load("rot", np.arange(32 * 4, dtype=np.float32).reshape(32, 4))
    k.emit(Opcode.NC_STREAM_SHUFFLE, rot, [rot], mask=ROTATE)
    k.results.append(rot)
    out = k.run(executor)
    assert np.array_equal(out["bcast"], np.repeat(x, 32, axis=0))
    assert np.array_equal(out["kept"], shuffle_ref(old, np.arange(32 * 16, dtype=np.int32).reshape(32, 16),
                                                   keep_mask))
    rows = np.arange(32 * 4, dtype=np.float32).reshape(32, 4)
    assert np.array_equal(out["rot"], rows[list(ROTATE)])


def test_keep_entries_make_dst_a_read():
    """A 255 entry within dst's partitions keeps old values, so dst counts as read (scheduling, the
    uninitialized-read check); a mask fully used does not read dst."""
    b = ProgramBuilder()
    src, dst = b.sbuf("s", (32, 8), "float32"), b.sbuf("d", (4, 8), "float32")
    full = b.emit(Opcode.NC_STREAM_SHUFFLE, dst, [src], mask=(1, 2, 3, 4) + (255,) * 28)
    partial = b.emit(Opcode.NC_STREAM_SHUFFLE, dst, [src], mask=(1, 255) + (0,) * 30)
    assert not full.reads_dst() and partial.reads_dst()
    assert [w for ap, w in partial.accesses() if ap.tensor is dst] == [False, True]


def test_cost_and_checks():
    """S23: max(MIN_II, N); mask of 32 partitions or 255; one dtype; equal free sizes; src partitions
    the mask reaches."""
    b = ProgramBuilder()
    s, d = b.sbuf("s", (128, 1000), "bfloat16"), b.sbuf("d", (128, 1000), "bfloat16")
    assert cycles(b.emit(Opcode.NC_STREAM_SHUFFLE, d, [s], mask=ROTATE)) == 1000
    small = b.sbuf("small", (32, 10), "bfloat16")
    assert cycles(b.emit(Opcode.NC_STREAM_SHUFFLE, small, [small], mask=ROTATE)) == 64

    def emit(k, mask=ROTATE, src_shape=(32, 8), dst_shape=(32, 8), dst_dtype="float32"):
        src = k.load("x", np.zeros(src_shape, np.float32))
        k.emit(Opcode.NC_STREAM_SHUFFLE, k.result("y", dst_shape, dst_dtype), [src], mask=mask)

    rejects(lambda k: emit(k, mask=(0,) * 31), ConstraintError, "list of 32 partition numbers")
    rejects(lambda k: emit(k, mask=(0,) * 31 + (32,)), ConstraintError, r"shuffle_mask\[31\] = 32")
    rejects(lambda k: emit(k, dst_dtype="bfloat16"), DtypeError, "dst is bfloat16 but src is float32")
    rejects(lambda k: emit(k, dst_shape=(32, 4)), ConstraintError, "4 elements per partition but src has 8")
    rejects(lambda k: emit(k, src_shape=(4, 8), mask=(5,) * 32), ConstraintError,
            "dst partition 0 takes src partition 5.*src has 4 partitions")
    rejects(lambda k: emit(k, src_shape=(32, 8), dst_shape=(64, 8), mask=(0,) * 32), ConstraintError,
            "dst partition 32 takes src partition 32")

    def stray(k):
        src = k.load("x", np.zeros((32, 8), np.float32))
        k.emit(Opcode.NC_STREAM_SHUFFLE, k.result("y", (32, 8)), [src], mask=ROTATE, perm=1)
    rejects(stray, ConstraintError, r"unknown immediates \['perm'\]")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_shuffle) == {Opcode.NC_STREAM_SHUFFLE}
