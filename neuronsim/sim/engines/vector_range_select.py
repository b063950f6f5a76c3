"""VectorE range_select: keep the elements whose free index lies between two per-partition bounds, with
a fused max — checks, semantics (numpy reference and Numba) and cost side by side.

S16: for element ``j`` of a partition, ``i = range_start + j`` (as fp32) is compared with the
partition's ``bound0`` and ``bound1`` (fp32 ``[P, 1]`` tiles) by ``cmp0`` and ``cmp1``; where both hold
the element of ``on_true`` is written, else ``on_false`` (FP32_MIN, the one value hardware takes).
The selected row is reduced by maximum into ``dst2`` (``reduce_res``) in fp32, before dst's rounding:
a bf16 dst holds -inf where a row was filled, the fp32 ``reduce_res`` FP32_MIN (the doc's
numerical-stability note). The max folds left to right from -inf, NaN-propagating (``alu.max_f32``).

Cost (S23, trainium-hardware.md §2.8): ``max(MIN_II, N)`` VectorE cycles with the elementwise stride
penalty (``common.elementwise_cycles``); the fused reduction is free.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.alu import alu_np, max_f32
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    require,
    require_alu,
    require_free_limit,
    require_known_immediates,
    require_operands,
    require_same_shape,
    require_shape,
)
from neuronsim.sim.ir import AluOp, Instruction, Opcode
from neuronsim.sim.memory.access import gather_f32, scatter_f32
from neuronsim.sim.memory.reference import RefMemory

RANGE_COMPARE_OPS = (AluOp.equal, AluOp.less, AluOp.less_equal, AluOp.greater, AluOp.greater_equal)
FILL_VALUE = float(np.finfo(np.float32).min)  # S16: on_false_value must be FP32_MIN
INDEX_EXACT_MAX = 2**24  # S16: range_start + index is compared in fp32, exact below 2^24
_EQ, _LT, _LE, _GT, _GE = (int(op) for op in RANGE_COMPARE_OPS)


def _check_range_select(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"cmp0", "cmp1", "range_start", "on_false"}))
    require_operands(ins, 3)
    data, bound0, bound1 = ins.srcs
    for name in ("cmp0", "cmp1"):
        require_alu(ins, name, RANGE_COMPARE_OPS)
    require(np.float32(ins.imm.get("on_false", FILL_VALUE)) == np.float32(FILL_VALUE), ins,
            f"on_false={ins.imm.get('on_false')!r}; range_select fills with FP32_MIN ({FILL_VALUE}) only")
    start = ins.imm.get("range_start", 0)
    require(isinstance(start, int) and 0 <= start and start + data.free_size <= INDEX_EXACT_MAX, ins,
            f"range_start={start!r} with {data.free_size} elements: indices must be integers in [0, 2^24]")
    if not data.dtype.is_float:
        raise fail(ins, f"on_true_tile is {data.dtype.name}; range_select selects float data", DtypeError)
    for ap, role in ((bound0, "bound0"), (bound1, "bound1")):
        require_shape(ins, ap, data.partitions, 1, role)
        if ap.dtype is not DType.float32:
            raise fail(ins, f"{role} is {ap.dtype.name}; bounds are float32", DtypeError)
    require_same_shape(ins, ins.dst, data, "dst", "on_true_tile")
    if ins.dst2 is not None:
        require_shape(ins, ins.dst2, data.partitions, 1, "reduce_res")
        if not ins.dst2.dtype.is_float:
            raise fail(ins, f"reduce_res is {ins.dst2.dtype.name}; it holds a float maximum", DtypeError)
    require_free_limit(ins, chip)


def _cycles_range_select(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``max(MIN_II, N)`` (with the stride penalty); the fused max is free."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _ref_range_select(ins: Instruction, mem: RefMemory) -> None:
    data = mem.read(ins.srcs[0])
    b0, b1 = mem.read(ins.srcs[1]), mem.read(ins.srcs[2])
    index = (np.int64(ins.imm.get("range_start", 0)) + np.arange(data.shape[1])).astype(np.float32)
    index = np.broadcast_to(index, data.shape)
    keep = (alu_np(AluOp(ins.imm["cmp0"]), index, b0) != 0) & (alu_np(AluOp(ins.imm["cmp1"]), index, b1) != 0)
    out = np.where(keep, data, np.float32(FILL_VALUE)).astype(np.float32)
    mem.write(ins.dst, out)
    if ins.dst2 is not None:
        acc = np.full((data.shape[0], 1), -np.inf, dtype=np.float32)
        for j in range(out.shape[1]):
            acc = alu_np(AluOp.maximum, acc, out[:, j:j + 1])
        mem.write(ins.dst2, acc)


def _encode_range_select(ins: Instruction) -> tuple[list[int], list[float]]:
    ints = [int(AluOp(ins.imm["cmp0"])), int(AluOp(ins.imm["cmp1"])), int(ins.imm.get("range_start", 0)),
            int(ins.dst2 is not None)]
    return ints, []


@njit(cache=True, inline="always")
def _holds(op, a, b):
    if op == _EQ:
        return a == b
    if op == _LT:
        return a < b
    if op == _LE:
        return a <= b
    if op == _GT:
        return a > b
    return a >= b


@njit(cache=True)
def _nb_range_select(row, frow, bases):
    data = gather_f32(row, SRC0, bases)
    b0, b1 = gather_f32(row, SRC1, bases), gather_f32(row, SRC2, bases)
    cmp0, cmp1, start, reduce = row[IMM], row[IMM + 1], row[IMM + 2], row[IMM + 3]
    parts, n = data.shape
    fill = np.float32(-3.4028234663852886e38)
    out = np.empty((parts, n), dtype=np.float32)
    acc = np.empty((parts, 1), dtype=np.float32)
    for p in range(parts):
        m = np.float32(-np.inf)
        for j in range(n):
            i = np.float32(start + j)
            v = data[p, j] if _holds(cmp0, i, b0[p, 0]) and _holds(cmp1, i, b1[p, 0]) else fill
            out[p, j] = v
            m = max_f32(m, v)
        acc[p, 0] = m
    scatter_f32(row, DST, bases, out)
    if reduce:
        scatter_f32(row, DST2, bases, acc)


OPS = [OpDef(Opcode.RANGE_SELECT, _check_range_select, _cycles_range_select, _ref_range_select,
             _encode_range_select, _nb_range_select)]
