"""GpSimd top-K (sim/engines/gpsimd_topk.py): nisa.topk's snake layout on both executors, its
documented cost, the partial writes the uninitialized-read check sees, and every static check."""

import ml_dtypes
import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, OneOp, cycles, registered_opcodes, rejects

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, UninitializedReadError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import gpsimd_topk

BF16 = ml_dtypes.bfloat16


def snake_topk(x: np.ndarray, n: int, k: int, vals: np.ndarray, idx: np.ndarray) -> None:
    """The documented result, written independently: per 16-partition group, snake position s is
    x[s % 16, s // 16]; the K largest (NaN first, ties to the lower position) go out ascending, result
    j at [j % 16, j // 16]."""
    for g in range(0, x.shape[0], 16):
        snake = [(x[g + s % 16, s // 16], s) for s in range(n)]

        def rank(item):
            v, s = float(item[0]), item[1]
            return (np.isnan(v), 0.0 if np.isnan(v) else v, -s)
        best = sorted(snake, key=rank)[n - k:]
        for j, (v, s) in enumerate(best):
            vals[g + j % 16, j // 16] = v
            idx[g + j % 16, j // 16] = s


def topk_program(x, n, k, before_val, before_idx):
    op = OneOp()
    src = op.load("x", x)
    val = op.load("val", before_val)
    idx = op.load("idx", before_idx)
    op.results += [val, idx]
    op.b.emit(Opcode.TOPK, val, [src], dst2=idx, location="kernel.py:7", n=n)
    return op


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("n,k", [(42, 8), (150, 37), (64, 64)])
def test_topk_selects_the_k_largest_of_each_group_ascending_in_snake_layout(executor, n, k):
    """S16: val_dst gets the K largest of the group's n snake elements in ascending order and idx_dst
    their positions, both as a snake; the other positions keep their contents."""
    rng = np.random.default_rng(n)
    cols = -(-n // 16) + 1
    x = rng.integers(-20, 20, (48, cols)).astype(BF16)  # repeated values: ties
    x[0, 0], x[3, 1], x[17, 2], x[20, 0] = np.nan, -0.0, np.inf, -np.inf
    before_val = np.full((48, k), 7.5, BF16)
    before_idx = np.full((48, k), 99999, np.uint32)
    got = topk_program(x, n, k, before_val, before_idx).run(executor)
    want_val, want_idx = before_val.copy(), before_idx.copy()
    snake_topk(x, n, k, want_val, want_idx)
    assert np.array_equal(got["val"].view(np.uint16), want_val.view(np.uint16))
    assert np.array_equal(got["idx"], want_idx)
    assert got["idx"][0, 0] != 99999 and np.isnan(float(got["val"][(k - 1) % 16, (k - 1) // 16]))


def test_topk_on_the_stubs_example_reads_the_kernels_own_tile():
    """The stub's example: n = 42 in a [P, 3] snake, K = 8: the top 8 of 0..41 are 34..41."""
    x = np.zeros((16, 3), BF16)
    for s in range(42):
        x[s % 16, s // 16] = s
    got = topk_program(x, 42, 8, np.zeros((16, 8), BF16), np.zeros((16, 8), np.uint32)).run("numba")
    assert [int(got["idx"][j, 0]) for j in range(8)] == list(range(34, 42))
    assert [float(got["val"][j, 0]) for j in range(8)] == list(range(34, 42))


def test_topk_cost_is_four_n_plus_k():
    b = ProgramBuilder()
    s, v = b.sbuf("s", (128, 40), "bfloat16"), b.sbuf("v", (128, 24), "bfloat16")
    i = b.sbuf("i", (128, 24), "uint32")
    assert cycles(b.emit(Opcode.TOPK, v, [s], dst2=i, n=630)) == 4 * 630 + 24


def test_topk_writes_only_k_positions_and_reads_only_n_for_the_uninitialized_check():
    """A fresh val_dst/idx_dst is not read (only merged), and a src written only up to n is enough;
    reading back an unwritten destination position is still caught."""
    b = ProgramBuilder()
    h = b.hbm("h", (32, 3), "bfloat16")
    s = b.sbuf("s", (32, 4), "bfloat16")
    v, i = b.sbuf("v", (32, 20), "bfloat16"), b.sbuf("i", (32, 20), "uint32")
    b.emit(Opcode.DMA_COPY, s.ap([[4, 32], [1, 3]]), [h])  # columns 0..2: positions 0..47
    b.emit(Opcode.TOPK, v, [s], dst2=i, n=40, location="kernel.py:3")
    out = b.hbm("o", (32, 1), "bfloat16", kind="output")
    b.emit(Opcode.DMA_COPY, out, [v.ap([[20, 32], [1, 1]])], location="kernel.py:4")  # results 0..15
    out4 = b.hbm("o4", (4, 1), "uint32", kind="output")
    b.emit(Opcode.DMA_COPY, out4, [i.ap([[20, 4], [1, 1]], offset=20 * 16 + 1)])  # results 16..19
    sim.prepare(b.build(), CHIP, uninitialized_memory="error")
    # 4 of 16 written
    b.emit(Opcode.DMA_COPY, out, [v.ap([[20, 32], [1, 1]], offset=1)], location="kernel.py:5")
    with pytest.raises(UninitializedReadError, match="kernel.py:5"):
        sim.prepare(b.build(), CHIP, uninitialized_memory="error")


def test_topk_checks():
    def emit(op, p=32, cols=4, k=8, n=40, src="bfloat16", val="bfloat16", idx="uint32", idx_k=None, **imm):
        x = op.load("s", np.zeros((p, cols), src if src != "bfloat16" else BF16), src)
        v, i = op.result("v", (p, k), val), op.result("i", (p, k if idx_k is None else idx_k), idx)
        op.b.emit(Opcode.TOPK, v, [x], dst2=i, location="kernel.py:7", n=n, **imm)
    rejects(lambda op: emit(op, src="float32"), DtypeError, "src is float32; topk's src must be bfloat16")
    rejects(lambda op: emit(op, idx="int32"), DtypeError, "idx_dst is int32; topk's idx_dst must be uint32")
    rejects(lambda op: emit(op, p=24), ConstraintError, "multiple of 16")
    rejects(lambda op: emit(op, n=7), ConstraintError, "n=7 must be an int with 8 <= n < 65536")
    rejects(lambda op: emit(op, n=65), ConstraintError, "src has 4 per partition")
    rejects(lambda op: emit(op, k=41), ConstraintError, "K <= n=40")
    rejects(lambda op: emit(op, idx_k=9), ConstraintError, "val_dst's K=8")
    rejects(lambda op: emit(op, largest=True), ConstraintError, "unknown immediates")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(gpsimd_topk) == {Opcode.TOPK}
