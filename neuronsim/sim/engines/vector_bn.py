"""VectorE batch-norm statistics: bn_stats and bn_aggr — checks, semantics (numpy reference and
Numba) and costs side by side.

bn_stats writes, per partition, (count, mean, var*count) of the even-indexed elements, then of the
odd ones (S16); bn_aggr combines such tuples into (mean, variance). Every arithmetic step is one
fp32 operation rounded once, in the same order in both executors; results round to the destination
dtype once, on the write.

Costs are the legacy per-instruction estimates (S23, trainium-hardware.md §2.8) in VectorE cycles,
with N the elements per partition of the source.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.encoding import DST, SRC0
from neuronsim.sim.engines.common import (
    OpDef,
    max_ii,
    no_immediates,
    require,
    require_known_immediates,
    require_operands,
    require_shape,
    require_vector_free,
)
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import ap_free, ap_parts, f32_rows, gather_f32, row_offsets, scatter_f32
from neuronsim.sim.memory.reference import RefMemory

BN_STATS_FIELDS = 6  # (count, mean, var*count) of the even elements, then of the odd ones (S16)
BN_TUPLE = 3  # bn_aggr reads (count, mean, var*count) tuples
BN_AGGR_FIELDS = 2  # mean, variance


# ---------------------------------------------------------------- bn_stats

def _check_bn_stats(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    data = ins.srcs[0]
    require(data.free_size <= chip.bn_stats_free_max, ins,
            f"data has {data.free_size} elements per partition; bn_stats reads at most "
            f"{chip.bn_stats_free_max}")
    require_shape(ins, ins.dst, data.partitions, BN_STATS_FIELDS, "dst")


def _cycles_bn_stats(ins: Instruction, chip: ChipSpec) -> float:
    """S23: max(MIN_II, N), N <= bn_stats_free_max."""
    return max_ii(ins.srcs[0].free_size, chip)


def _bn_half_np(x: np.ndarray) -> list[np.ndarray]:
    """(count, mean, M2) of the columns of fp32 ``x`` [P, c], two-pass, folds left to right."""
    parts, count = x.shape
    if count == 0:
        zero = np.zeros(parts, dtype=np.float32)
        return [zero, zero, zero]
    c = np.float32(count)
    total = x[:, 0].copy()
    for j in range(1, count):
        total = total + x[:, j]
    mean = total / c
    m2 = np.zeros(parts, dtype=np.float32)
    for j in range(count):
        d = x[:, j] - mean
        m2 = m2 + d * d
    return [np.full(parts, c, dtype=np.float32), mean, m2]


def _ref_bn_stats(ins: Instruction, mem: RefMemory) -> None:
    """[count, mean, var*count] of the even-indexed elements, then of the odd ones (S16 layout).
    mean = (x0 + x1 + ...) / count and var*count = sum((x - mean)^2), each step in fp32; a half with
    no elements (N = 1) gives zeros."""
    x = mem.read(ins.srcs[0])
    with np.errstate(all="ignore"):  # inf and NaN are values here, not faults
        halves = _bn_half_np(x[:, 0::2]) + _bn_half_np(x[:, 1::2])
    mem.write(ins.dst, np.stack(halves, axis=1))


@njit(cache=True)
def _bn_half(x, p, first, n, out, at):
    count = (n - first + 1) // 2
    if count == 0:
        out[p, at] = np.float32(0.0)
        out[p, at + 1] = np.float32(0.0)
        out[p, at + 2] = np.float32(0.0)
        return
    c = np.float32(count)
    total = x[p, first]
    for j in range(first + 2, n, 2):
        total = np.float32(total + x[p, j])
    mean = np.float32(total / c)
    m2 = np.float32(0.0)
    for j in range(first, n, 2):
        d = np.float32(x[p, j] - mean)
        m2 = np.float32(m2 + np.float32(d * d))
    out[p, at] = c
    out[p, at + 1] = mean
    out[p, at + 2] = m2


@njit(cache=True)
def _bn_half8(x, p, first, n, out, at):
    """``_bn_half`` of partitions p .. p+7 side by side: eight chains in registers, each in the
    same order as alone (one fp32 latency per eight elements instead of per element)."""
    count = (n - first + 1) // 2
    if count == 0:
        for q in range(p, p + 8):
            _bn_half(x, q, first, n, out, at)
        return
    c = np.float32(count)
    t0, t1, t2, t3 = x[p, first], x[p + 1, first], x[p + 2, first], x[p + 3, first]
    t4, t5, t6, t7 = x[p + 4, first], x[p + 5, first], x[p + 6, first], x[p + 7, first]
    for j in range(first + 2, n, 2):
        t0, t1, t2, t3 = t0 + x[p, j], t1 + x[p + 1, j], t2 + x[p + 2, j], t3 + x[p + 3, j]
        t4, t5, t6, t7 = t4 + x[p + 4, j], t5 + x[p + 5, j], t6 + x[p + 6, j], t7 + x[p + 7, j]
    m0, m1, m2, m3 = np.float32(t0 / c), np.float32(t1 / c), np.float32(t2 / c), np.float32(t3 / c)
    m4, m5, m6, m7 = np.float32(t4 / c), np.float32(t5 / c), np.float32(t6 / c), np.float32(t7 / c)
    v0 = v1 = v2 = v3 = v4 = v5 = v6 = v7 = np.float32(0.0)
    for j in range(first, n, 2):
        d0, d1, d2, d3 = x[p, j] - m0, x[p + 1, j] - m1, x[p + 2, j] - m2, x[p + 3, j] - m3
        d4, d5, d6, d7 = x[p + 4, j] - m4, x[p + 5, j] - m5, x[p + 6, j] - m6, x[p + 7, j] - m7
        v0, v1, v2, v3 = v0 + d0 * d0, v1 + d1 * d1, v2 + d2 * d2, v3 + d3 * d3
        v4, v5, v6, v7 = v4 + d4 * d4, v5 + d5 * d5, v6 + d6 * d6, v7 + d7 * d7
    for q, mean, var_count in ((0, m0, v0), (1, m1, v1), (2, m2, v2), (3, m3, v3), (4, m4, v4),
                               (5, m5, v5), (6, m6, v6), (7, m7, v7)):
        out[p + q, at] = c
        out[p + q, at + 1] = mean
        out[p + q, at + 2] = var_count


@njit(cache=True)
def _nb_bn_stats(row, frow, bases):
    x = f32_rows(row, SRC0, bases, row_offsets(row, SRC0))  # in place when plain (NaNs: see vector_reduce)
    if not x.size:
        x = gather_f32(row, SRC0, bases)
    parts, n = ap_parts(row, SRC0), ap_free(row, SRC0)
    out = np.empty((parts, 6), dtype=np.float32)
    p = 0
    while p + 8 <= parts:
        _bn_half8(x, p, 0, n, out, 0)
        _bn_half8(x, p, 1, n, out, 3)
        p += 8
    for q in range(p, parts):
        _bn_half(x, q, 0, n, out, 0)
        _bn_half(x, q, 1, n, out, 3)
    scatter_f32(row, DST, bases, out)


# ---------------------------------------------------------------- bn_aggr

def _check_bn_aggr(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    data = ins.srcs[0]
    require(data.free_size % BN_TUPLE == 0, ins,
            f"data has {data.free_size} elements per partition; bn_aggr reads (count, mean, var*count) "
            f"tuples, so it must be a multiple of {BN_TUPLE}")
    require_shape(ins, ins.dst, data.partitions, BN_AGGR_FIELDS, "dst")
    require_vector_free(ins, chip, data, "data")


def _cycles_bn_aggr(ins: Instruction, chip: ChipSpec) -> float:
    """S23: max(MIN_II, 13N/3)."""
    return max_ii(13 * ins.srcs[0].free_size / 3, chip)


@np.errstate(all="ignore")  # inf and NaN are values here, not faults
def _ref_bn_aggr(ins: Instruction, mem: RefMemory) -> None:
    """Combine (count_i, mean_i, M2_i) tuples in order, in fp32, skipping tuples with count 0:
    n = sum(count_i); mean = sum(count_i * mean_i) / n;
    var = sum(M2_i + count_i * (mean_i - mean)^2) / n  (population variance, S16: "variance").
    With n = 0 the result is (0, 0)."""
    t = mem.read(ins.srcs[0]).reshape(ins.srcs[0].partitions, -1, BN_TUPLE)
    count, mean_i, m2_i = t[:, :, 0], t[:, :, 1], t[:, :, 2]
    used = count != 0
    zero = np.zeros(t.shape[0], dtype=np.float32)
    n, total = zero.copy(), zero.copy()
    for i in range(t.shape[1]):
        n = np.where(used[:, i], n + count[:, i], n)
        total = np.where(used[:, i], total + count[:, i] * mean_i[:, i], total)
    empty = n == 0
    safe_n = np.where(empty, np.float32(1), n)
    mean = total / safe_n
    acc = zero.copy()
    for i in range(t.shape[1]):
        d = mean_i[:, i] - mean
        step = (acc + m2_i[:, i]) + count[:, i] * (d * d)
        acc = np.where(used[:, i], step, acc)
    var = acc / safe_n
    mem.write(ins.dst, np.stack([np.where(empty, zero, mean), np.where(empty, zero, var)], axis=1))


@njit(cache=True)
def _nb_bn_aggr(row, frow, bases):
    t = gather_f32(row, SRC0, bases)
    parts, k = t.shape[0], t.shape[1] // 3
    out = np.empty((parts, 2), dtype=np.float32)
    for p in range(parts):
        n = np.float32(0.0)
        total = np.float32(0.0)
        for i in range(k):
            c = t[p, 3 * i]
            if c != 0:
                n = np.float32(n + c)
                total = np.float32(total + np.float32(c * t[p, 3 * i + 1]))
        if n == 0:
            out[p, 0] = np.float32(0.0)
            out[p, 1] = np.float32(0.0)
            continue
        mean = np.float32(total / n)
        acc = np.float32(0.0)
        for i in range(k):
            c = t[p, 3 * i]
            if c != 0:
                d = np.float32(t[p, 3 * i + 1] - mean)
                acc = np.float32(acc + t[p, 3 * i + 2])
                acc = np.float32(acc + np.float32(c * np.float32(d * d)))
        out[p, 0] = mean
        out[p, 1] = np.float32(acc / n)
    scatter_f32(row, DST, bases, out)

OPS = [
    OpDef(Opcode.BN_STATS, _check_bn_stats, _cycles_bn_stats, _ref_bn_stats, no_immediates, _nb_bn_stats),
    OpDef(Opcode.BN_AGGR, _check_bn_aggr, _cycles_bn_aggr, _ref_bn_aggr, no_immediates, _nb_bn_aggr),
]
