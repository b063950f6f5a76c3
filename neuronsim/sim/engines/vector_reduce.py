"""VectorE reductions and statistics: tensor_reduce, tensor_tensor_scan, bn_stats, bn_aggr, max8 and
nc_find_index8 — checks, semantics (numpy reference and Numba) and costs side by side.

Numerics, identical in both executors: sources are read as fp32, every arithmetic step is one fp32
operation rounded once (``alu_f32`` / ``alu_np``, or a single fp32 ``+ - * /``), and folds run left
to right along the free dim (row-major over the free dims of the access pattern). Results round to
the destination dtype once, on the write. Bit operators (tensor_reduce with a bitvec ``op``) work on
the integer values instead and wrap to the destination's width (``alu_int``).

Costs are the legacy per-instruction estimates (S23, trainium-hardware.md §2.8) in VectorE cycles,
with N the elements per partition of the (first) source.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.alu import alu_f32, alu_int, alu_int_np, alu_np, max_f32, min_f32
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    max_ii,
    no_immediates,
    require,
    require_dtype,
    require_operands,
    require_same_shape,
)
from neuronsim.sim.ir import BITVEC_ALU_OPS, REDUCE_ALU_OPS, AccessPattern, AluOp, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import (
    F_DTYPE,
    RefMemory,
    ap_free,
    ap_parts,
    f32_rows,
    gather_f32,
    gather_i64,
    row_offsets,
    scatter_f32,
    scatter_i64,
)

# max8 / nc_find_index8 (S16): exactly 8 results per partition, from 8 to 16,384 elements read per
# partition. The same in every NKI generation's docs, so it is an ISA constant, not a chip number.
TOP_K = 8
TOP_K_FREE_MAX = 16384
BN_STATS_FIELDS = 6  # (count, mean, var*count) of the even elements, then of the odd ones (S16)
BN_TUPLE = 3  # bn_aggr reads (count, mean, var*count) tuples
BN_AGGR_FIELDS = 2  # mean, variance
UNARY_ALU_OPS = frozenset({AluOp.abs, AluOp.square, AluOp.relu, AluOp.rsqrt, AluOp.reciprocal, AluOp.invert})
INDEX_DTYPES = (DType.uint16, DType.uint32)  # nc_find_index8 output (S16: uint16 or uint32)
_NOT_FOUND = 2**32 - 1  # nc_find_index8 for a value not present; saturates to the dst dtype's maximum


# ---------------------------------------------------------------- shared checks and immediates

def require_imm_keys(ins: Instruction, known: frozenset) -> None:
    """Reject immediates the opcode does not take (a misspelt ``num_axis`` would be ignored)."""
    unknown = sorted(set(ins.imm) - known)
    require(not unknown, ins, f"has unknown immediates {unknown}; known: {sorted(known)}")


def alu_imm(ins: Instruction, name: str, default=None) -> AluOp:
    """The ``AluOp`` immediate ``name`` (an AluOp, its value or its name)."""
    raw = ins.imm.get(name, default)
    if raw is None:
        raise fail(ins, f"needs the immediate '{name}' (an ALU operator)")
    try:
        return AluOp[raw] if isinstance(raw, str) else AluOp(raw)
    except (KeyError, ValueError):
        raise fail(ins, f"immediate {name}={raw!r} is not an ALU operator") from None


def _require_alu(ins: Instruction, name: str, allowed, default=None) -> AluOp:
    op = alu_imm(ins, name, default)
    require(op in allowed, ins, f"{name}={op.name} is not allowed here; allowed: "
            f"{', '.join(sorted(o.name for o in allowed))}")
    return op


def _require_vector_free(ins: Instruction, chip: ChipSpec, ap: AccessPattern, role: str) -> None:
    """S9: VectorE reads up to 64K elements per partition from SBUF, 4K from PSUM."""
    limit = chip.vector_free_max_psum if ap.memory is Memory.PSUM else chip.vector_free_max_sbuf
    require(ap.free_size <= limit, ins, f"{role} has {ap.free_size} elements per partition; VectorE reads at "
            f"most {limit} per partition from {ap.memory.name}")


def _require_shape(ins: Instruction, ap: AccessPattern, partitions: int, free: int, role: str) -> None:
    require(ap.partitions == partitions and ap.free_size == free, ins,
            f"{role} is {ap.partitions}x{ap.free_size} (partitions x free) but must be {partitions}x{free}")


def _require_int(ins: Instruction, ap: AccessPattern, role: str, why: str) -> None:
    if not ap.dtype.is_int:
        raise fail(ins, f"{role} dtype {ap.dtype.name} is not an integer dtype; {why}", DtypeError)


def _flag(ins: Instruction, name: str) -> bool:
    return bool(ins.imm.get(name, False))


# ---------------------------------------------------------------- fold identities

_F32_IDENTITY = {
    AluOp.add: -0.0,  # -0.0 + x == x for every x, including -0.0
    AluOp.multiply: 1.0,
    AluOp.maximum: -math.inf,
    AluOp.minimum: math.inf,
    AluOp.abs_max: 0.0,
    AluOp.abs_min: math.inf,
    AluOp.logical_and: 1.0,
    AluOp.logical_or: 0.0,
}
_INT_IDENTITY = {AluOp.bitwise_and: -1, AluOp.bitwise_or: 0, AluOp.bitwise_xor: 0}

_ADD, _MUL, _MAX, _MIN = int(AluOp.add), int(AluOp.multiply), int(AluOp.maximum), int(AluOp.minimum)
_AMIN, _LAND = int(AluOp.abs_min), int(AluOp.logical_and)
_BAND = int(AluOp.bitwise_and)


@njit(cache=True)
def identity_f32(op):
    """The value a fold over ``op`` starts from, so one element folds to ``op(identity, x)``."""
    if op == _ADD:
        return np.float32(-0.0)
    if op == _MUL or op == _LAND:
        return np.float32(1.0)
    if op == _MAX:
        return np.float32(-np.inf)
    if op == _MIN or op == _AMIN:
        return np.float32(np.inf)
    return np.float32(0.0)  # abs_max, logical_or


@njit(cache=True)
def identity_int(op):
    if op == _BAND:
        return np.int64(-1)
    return np.int64(0)


# ---------------------------------------------------------------- tensor_reduce

def _reduced_group(ins: Instruction) -> int:
    """Elements folded into each result: the product of the trailing ``num_axes`` free dims."""
    free = ins.srcs[0].free_dims
    return math.prod(n for _, n in free[len(free) - int(ins.imm["num_axes"]):])


def _check_reduce(ins: Instruction, chip: ChipSpec) -> None:
    require_imm_keys(ins, frozenset({"op", "num_axes", "negate"}))
    require_operands(ins, 1)
    data, dst = ins.srcs[0], ins.dst
    op = _require_alu(ins, "op", REDUCE_ALU_OPS)
    require("num_axes" in ins.imm, ins,
            "needs the immediate 'num_axes' (how many trailing free dims to reduce)")
    n_free = len(data.free_dims)
    num_axes = ins.imm["num_axes"]
    require(isinstance(num_axes, int) and 1 <= num_axes <= n_free, ins,
            f"num_axes={num_axes!r}: tensor_reduce reduces 1 to {n_free} trailing free dims of "
            f"{data.describe()}")
    kept = data.free_size // _reduced_group(ins)
    _require_shape(ins, dst, data.partitions, kept, "dst")
    _require_vector_free(ins, chip, data, "data")
    if op in BITVEC_ALU_OPS:
        why = f"{op.name} treats elements as bit patterns"
        _require_int(ins, data, "data", why)
        _require_int(ins, dst, "dst", why)
        require(not _flag(ins, "negate"), ins, f"negate applies to arithmetic reductions, not {op.name}")


def _cycles_reduce(ins: Instruction, chip: ChipSpec) -> float:
    """S23: N/2 if bf16 in and out with add/max, else N."""
    n = ins.srcs[0].free_size
    fast = (ins.srcs[0].dtype is DType.bfloat16 and ins.dst.dtype is DType.bfloat16
            and alu_imm(ins, "op") in (AluOp.add, AluOp.maximum))
    return n / 2 if fast else float(n)


def _ref_reduce(ins: Instruction, mem: RefMemory) -> None:
    data, dst = ins.srcs[0], ins.dst
    op = alu_imm(ins, "op")
    group = _reduced_group(ins)
    if op in BITVEC_ALU_OPS:
        x = mem.read_int(data).reshape(data.partitions, -1, group)
        acc = np.full(x.shape[:2], _INT_IDENTITY[op], dtype=np.int64)
        for r in range(group):
            acc = alu_int_np(op, acc, x[:, :, r], dst.dtype)
        mem.write_int(dst, acc)
        return
    x = mem.read(data).reshape(data.partitions, -1, group)
    acc = np.full(x.shape[:2], _F32_IDENTITY[op], dtype=np.float32)
    for r in range(group):
        acc = alu_np(op, acc, x[:, :, r])
    mem.write(dst, -acc if _flag(ins, "negate") else acc)


def _enc_reduce(ins: Instruction) -> tuple[list[int], list[float]]:
    op = alu_imm(ins, "op")
    return [int(op), _reduced_group(ins), int(_flag(ins, "negate")), int(op in BITVEC_ALU_OPS)], []


@njit(cache=True)
def _nb_reduce(row, frow, bases):
    op, group, negate = row[IMM], row[IMM + 1], row[IMM + 2]
    if row[IMM + 3]:
        xi = gather_i64(row, SRC0, bases)
        code = row[DST + F_DTYPE]
        kept = xi.shape[1] // group
        out_i = np.empty((xi.shape[0], kept), dtype=np.int64)
        for p in range(xi.shape[0]):
            for k in range(kept):
                acc_i = identity_int(op)
                for r in range(group):
                    acc_i = alu_int(op, acc_i, xi[p, k * group + r], code)
                out_i[p, k] = acc_i
        scatter_i64(row, DST, bases, out_i)
        return
    offs = row_offsets(row, SRC0)
    x = f32_rows(row, SRC0, bases, offs)  # in place when plain (NaN payloads vanish in the store)
    if not x.size:
        x = gather_f32(row, SRC0, bases)
    kept = ap_free(row, SRC0) // group
    out = np.empty((ap_parts(row, SRC0), kept), dtype=np.float32)
    if op == _ADD or op == _MAX or op == _MIN:
        _fold_rows(op, x, group, out)
    else:
        for p in range(out.shape[0]):
            for k in range(kept):
                acc = identity_f32(op)
                for r in range(group):
                    acc = alu_f32(op, acc, x[p, k * group + r])
                out[p, k] = acc
    if negate:
        for p in range(out.shape[0]):
            for k in range(kept):
                out[p, k] = -out[p, k]
    scatter_f32(row, DST, bases, out)


@njit(cache=True, inline="always")
def _fold(op, a, b):
    """One step of an add, max or min fold."""
    if op == _ADD:
        return a + b
    if op == _MAX:
        return max_f32(a, b)
    return min_f32(a, b)


@njit(cache=True)
def _fold_rows(op, x, group, out):
    """``_fold_rows_of`` with the operator a constant in each copy (no per-element dispatch)."""
    if op == _ADD:
        _fold_rows_of(_ADD, x, group, out)
    elif op == _MAX:
        _fold_rows_of(_MAX, x, group, out)
    else:
        _fold_rows_of(_MIN, x, group, out)


@njit(cache=True, inline="always")
def _fold_rows_of(op, x, group, out):
    """``out[p, k]`` = the add, max or min fold, left to right from the identity, of
    ``x[p, k*group : (k+1)*group]``. Eight partitions fold side by side, each chain in order in a
    register: one fp32 latency per eight elements instead of per element."""
    parts, kept = out.shape
    init = identity_f32(op)
    p = 0
    while p + 8 <= parts:
        for k in range(kept):
            c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = init
            for r in range(k * group, (k + 1) * group):
                c0 = _fold(op, c0, x[p, r])
                c1 = _fold(op, c1, x[p + 1, r])
                c2 = _fold(op, c2, x[p + 2, r])
                c3 = _fold(op, c3, x[p + 3, r])
                c4 = _fold(op, c4, x[p + 4, r])
                c5 = _fold(op, c5, x[p + 5, r])
                c6 = _fold(op, c6, x[p + 6, r])
                c7 = _fold(op, c7, x[p + 7, r])
            out[p, k], out[p + 1, k], out[p + 2, k], out[p + 3, k] = c0, c1, c2, c3
            out[p + 4, k], out[p + 5, k], out[p + 6, k], out[p + 7, k] = c4, c5, c6, c7
        p += 8
    for q in range(p, parts):
        for k in range(kept):
            c = init
            for r in range(k * group, (k + 1) * group):
                c = _fold(op, c, x[q, r])
            out[q, k] = c


# ---------------------------------------------------------------- tensor_tensor_scan

_SCAN_OPS = frozenset(AluOp) - BITVEC_ALU_OPS - UNARY_ALU_OPS


def _check_scan(ins: Instruction, chip: ChipSpec) -> None:
    require_imm_keys(ins, frozenset({"op0", "op1", "initial", "initial_is_tile", "reverse0", "reverse1"}))
    tile = _flag(ins, "initial_is_tile")
    require_operands(ins, 3 if tile else 2)
    data0, data1, dst = ins.srcs[0], ins.srcs[1], ins.dst
    _require_alu(ins, "op0", _SCAN_OPS)
    _require_alu(ins, "op1", _SCAN_OPS)
    require_same_shape(ins, data0, data1, "data0", "data1")
    require_same_shape(ins, dst, data0, "dst", "data0")
    require(not (data0.memory is Memory.PSUM and data1.memory is Memory.PSUM), ins,
            "data0 and data1 cannot both be in PSUM")
    if tile:
        _require_shape(ins, ins.srcs[2], data0.partitions, 1, "the initial tile")
    else:
        require(isinstance(ins.imm.get("initial", 0.0), (int, float)), ins,
                f"initial={ins.imm.get('initial')!r} must be a number (or pass a [P, 1] tile)")
    _require_vector_free(ins, chip, data0, "data0")
    _require_vector_free(ins, chip, data1, "data1")


def _cycles_scan(ins: Instruction, chip: ChipSpec) -> float:
    """S23: max(MIN_II, 2N) — two input tensors."""
    return max_ii(2 * ins.srcs[0].free_size, chip)


def _ref_scan(ins: Instruction, mem: RefMemory) -> None:
    """result[i] = op1(op0(data0[i], result[i-1]), data1[i]), result[-1] = initial (S16). The state
    carried from step to step is the fp32 result, before the rounding to dst's dtype."""
    d0, d1 = mem.read(ins.srcs[0]), mem.read(ins.srcs[1])
    op0, op1 = alu_imm(ins, "op0"), alu_imm(ins, "op1")
    rev0, rev1 = _flag(ins, "reverse0"), _flag(ins, "reverse1")
    if _flag(ins, "initial_is_tile"):
        state = mem.read(ins.srcs[2])[:, 0]
    else:
        state = np.full(d0.shape[0], np.float32(ins.imm.get("initial", 0.0)), dtype=np.float32)
    out = np.empty_like(d0)
    for i in range(d0.shape[1]):
        a = alu_np(op0, state, d0[:, i]) if rev0 else alu_np(op0, d0[:, i], state)
        state = alu_np(op1, d1[:, i], a) if rev1 else alu_np(op1, a, d1[:, i])
        out[:, i] = state
    mem.write(ins.dst, out)


def _enc_scan(ins: Instruction) -> tuple[list[int], list[float]]:
    ints = [int(alu_imm(ins, "op0")), int(alu_imm(ins, "op1")), int(_flag(ins, "reverse0")),
            int(_flag(ins, "reverse1")), int(_flag(ins, "initial_is_tile"))]
    return ints, [float(ins.imm.get("initial", 0.0))]


@njit(cache=True)
def _nb_scan(row, frow, bases):
    op0, op1, rev0, rev1, tile = row[IMM], row[IMM + 1], row[IMM + 2], row[IMM + 3], row[IMM + 4]
    d0 = gather_f32(row, SRC0, bases)
    d1 = gather_f32(row, SRC1, bases)
    parts, n = d0.shape
    if tile:
        init = gather_f32(row, SRC2, bases)
    else:
        init = np.full((parts, 1), np.float32(frow[0]), dtype=np.float32)
    out = np.empty((parts, n), dtype=np.float32)
    for p in range(parts):
        state = init[p, 0]
        for i in range(n):
            a = alu_f32(op0, state, d0[p, i]) if rev0 else alu_f32(op0, d0[p, i], state)
            state = alu_f32(op1, d1[p, i], a) if rev1 else alu_f32(op1, a, d1[p, i])
            out[p, i] = state
    scatter_f32(row, DST, bases, out)


# ---------------------------------------------------------------- bn_stats

def _check_bn_stats(ins: Instruction, chip: ChipSpec) -> None:
    require_imm_keys(ins, frozenset())
    require_operands(ins, 1)
    data = ins.srcs[0]
    require(data.free_size <= chip.bn_stats_free_max, ins,
            f"data has {data.free_size} elements per partition; bn_stats reads at most "
            f"{chip.bn_stats_free_max}")
    _require_shape(ins, ins.dst, data.partitions, BN_STATS_FIELDS, "dst")


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
    x = f32_rows(row, SRC0, bases, row_offsets(row, SRC0))  # in place when plain (NaNs: see reduce)
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
    require_imm_keys(ins, frozenset())
    require_operands(ins, 1)
    data = ins.srcs[0]
    require(data.free_size % BN_TUPLE == 0, ins,
            f"data has {data.free_size} elements per partition; bn_aggr reads (count, mean, var*count) "
            f"tuples, so it must be a multiple of {BN_TUPLE}")
    _require_shape(ins, ins.dst, data.partitions, BN_AGGR_FIELDS, "dst")
    _require_vector_free(ins, chip, data, "data")


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


# ---------------------------------------------------------------- max8

def _check_top_k_data(ins: Instruction, chip: ChipSpec, data: AccessPattern) -> None:
    require(TOP_K <= data.free_size <= TOP_K_FREE_MAX, ins,
            f"data has {data.free_size} elements per partition; {ins.opcode.name.lower()} reads {TOP_K} to "
            f"{TOP_K_FREE_MAX}")
    _require_vector_free(ins, chip, data, "data")


def _check_max8(ins: Instruction, chip: ChipSpec) -> None:
    require_imm_keys(ins, frozenset())
    require_operands(ins, 1)
    _check_top_k_data(ins, chip, ins.srcs[0])
    _require_shape(ins, ins.dst, ins.srcs[0].partitions, TOP_K, "dst")


def _cycles_top_k(ins: Instruction, chip: ChipSpec) -> float:
    """S23: N (max8, nc_find_index8)."""
    return float(ins.srcs[0].free_size)


def _ref_max8(ins: Instruction, mem: RefMemory) -> None:
    """The 8 largest values per partition, descending (S16). Assumed where the docs are silent: NaN
    ranks above every number, and equal values (0.0 and -0.0 included) keep their input order."""
    x = mem.read(ins.srcs[0])
    nan = np.isnan(x)
    order = np.lexsort((np.where(nan, np.float32(0), -x), ~nan), axis=-1)  # stable: ties keep order
    mem.write(ins.dst, np.take_along_axis(x, order[:, :TOP_K], axis=1))


@njit(cache=True, inline="always")
def _ranks_above(a, b):
    if a != a:
        return b == b
    if b != b:
        return False
    return a > b


@njit(cache=True)
def _nb_max8(row, frow, bases):
    x = gather_f32(row, SRC0, bases)
    parts, n = x.shape
    out = np.empty((parts, 8), dtype=np.float32)
    for p in range(parts):
        filled = 0
        for j in range(n):
            v = x[p, j]
            pos = filled
            for k in range(filled):
                if _ranks_above(v, out[p, k]):
                    pos = k
                    break
            if pos < 8:
                for k in range(min(filled, 7), pos, -1):
                    out[p, k] = out[p, k - 1]
                out[p, pos] = v
                filled = min(filled + 1, 8)
    scatter_f32(row, DST, bases, out)


# ---------------------------------------------------------------- nc_find_index8

def _check_find_index8(ins: Instruction, chip: ChipSpec) -> None:
    require_imm_keys(ins, frozenset())
    require_operands(ins, 2)
    data, vals = ins.srcs
    _check_top_k_data(ins, chip, data)
    _require_shape(ins, vals, data.partitions, TOP_K, "vals")
    _require_shape(ins, ins.dst, data.partitions, TOP_K, "dst")
    require_dtype(ins, ins.dst, INDEX_DTYPES, "dst")


def _ref_find_index8(ins: Instruction, mem: RefMemory) -> None:
    """Index (from 0, in the row-major order of data's free dims) of the first element equal to each
    of the 8 values (S16). Compared as fp32; NaN matches NaN. Assumed where the docs say
    "undefined": a value not present gives the dst dtype's largest value."""
    x, v = mem.read(ins.srcs[0]), mem.read(ins.srcs[1])
    eq = (x[:, None, :] == v[:, :, None]) | (np.isnan(x)[:, None, :] & np.isnan(v)[:, :, None])
    mem.write_int(ins.dst, np.where(eq.any(axis=2), eq.argmax(axis=2), _NOT_FOUND))


@njit(cache=True)
def _nb_find_index8(row, frow, bases):
    x = gather_f32(row, SRC0, bases)
    v = gather_f32(row, SRC1, bases)
    parts, n = x.shape
    out = np.empty((parts, 8), dtype=np.int64)
    for p in range(parts):
        for k in range(8):
            want = v[p, k]
            found = _NOT_FOUND
            for j in range(n):
                if x[p, j] == want or (x[p, j] != x[p, j] and want != want):
                    found = j
                    break
            out[p, k] = found
    scatter_i64(row, DST, bases, out)


OPS = [
    OpDef(Opcode.TENSOR_REDUCE, _check_reduce, _cycles_reduce, _ref_reduce, _enc_reduce, _nb_reduce),
    OpDef(Opcode.TENSOR_TENSOR_SCAN, _check_scan, _cycles_scan, _ref_scan, _enc_scan, _nb_scan),
    OpDef(Opcode.BN_STATS, _check_bn_stats, _cycles_bn_stats, _ref_bn_stats, no_immediates, _nb_bn_stats),
    OpDef(Opcode.BN_AGGR, _check_bn_aggr, _cycles_bn_aggr, _ref_bn_aggr, no_immediates, _nb_bn_aggr),
    OpDef(Opcode.MAX8, _check_max8, _cycles_top_k, _ref_max8, no_immediates, _nb_max8),
    OpDef(Opcode.NC_FIND_INDEX8, _check_find_index8, _cycles_top_k, _ref_find_index8, no_immediates,
          _nb_find_index8),
]
