"""GpSimdE: iota, affine_select and tensor_partition_reduce — checks, semantics (numpy reference and
Numba) and costs side by side.

GpSimd reads and writes SBUF only; the generic validator enforces that (``ENGINE_READS/WRITES``).

iota and affine_select evaluate the affine expression (S16)

    value(p, i) = offset + p * channel_multiplier + sum_k i_k * step_k

over the ``pattern`` (``(step, num)`` per free dim, outermost first; the nums multiply to dst's
elements per partition, which take the values in row-major order) and ``p`` = 0..P-1 the partition
relative to dst's first one. The values are exact integers: the check proves every value lies in
int32 (where the engine computes them), so no executor ever wraps.

tensor_partition_reduce folds ``op`` over the partitions in order (0, 1, ..., P-1): in fp32, except
bit operators (on the integers) and add/max with int32/uint32 data and dst, which use GpSimd's
native 32-bit integer arithmetic (S9) like tensor_tensor on GpSimd; integer results wrap to dst.

Costs (S23, trainium-hardware.md §2.5/§2.8) are in GpSimd cycles, N = elements per partition.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0
from neuronsim.sim.engines.alu import (
    NATIVE_INT_DTYPES,
    alu_f32,
    alu_int,
    alu_int_np,
    alu_np,
    identity_f32,
    identity_int,
    native_int,
    native_int_np,
)
from neuronsim.sim.engines.common import (
    OpDef,
    alu_immediate,
    fail,
    require,
    require_known_immediates,
    require_operands,
    require_same_shape,
)
from neuronsim.sim.ir import BITVEC_ALU_OPS, MAX_FREE_DIMS, AluOp, Instruction, Opcode
from neuronsim.sim.memory.access import (
    F_DTYPE,
    F_PARTS,
    gather_f32,
    gather_i64,
    gather_raw,
    scatter_f32,
    scatter_i64,
    scatter_raw,
)
from neuronsim.sim.memory.numerics import encode
from neuronsim.sim.memory.reference import RefMemory

# S9: each of the 8 GpSimd cores is wired to 16 consecutive partitions. (An ISA/architecture fact
# of every generation so far; it belongs in the chip files once ChipSpec has a key for it.)
PARTITIONS_PER_GPSIMD_CORE = 16
# A pattern dim's size is a uint16 in the instruction (S9, S17).
PATTERN_NUM_MAX = 2**16 - 1
_IS_INT = np.array([DType(c).is_int for c in range(len(DType))], dtype=np.bool_)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# A (step, num) pair travels packed in one int64 immediate: step << 17 | num.
_NUM_BITS = 17
_NUM_MASK = (1 << _NUM_BITS) - 1

COMPARE_OPS = frozenset({AluOp.equal, AluOp.not_equal, AluOp.greater, AluOp.greater_equal, AluOp.less,
                         AluOp.less_equal})
# S16: tensor_partition_reduce op is one of add, max, bitwise_or, bitwise_and.
PARTITION_REDUCE_OPS = frozenset({AluOp.add, AluOp.maximum, AluOp.bitwise_or, AluOp.bitwise_and})


def _gpsimd_start_plus_n(ins: Instruction, chip: ChipSpec) -> float:
    """S23: GPSIMD_START + N (iota: 150 + N; affine_select: ~150 + N)."""
    return float(chip.gpsimd_start_cycles + ins.dst.free_size)


# ---------------------------------------------------------------- the affine pattern

def _pattern(ins: Instruction) -> tuple[tuple[int, int], ...]:
    return tuple((int(s), int(n)) for s, n in ins.imm["pattern"])


def _check_pattern(ins: Instruction) -> None:
    """pattern, offset and channel_multiplier well formed, covering dst, every value in int32."""
    raw = ins.imm.get("pattern")
    require(raw is not None, ins, "needs the immediate 'pattern' ((step, num) per free dim)")
    try:
        pairs = _pattern(ins)
    except (TypeError, ValueError):
        raise fail(ins, f"pattern={raw!r} must be a sequence of (step, num) pairs") from None
    require(1 <= len(pairs) <= MAX_FREE_DIMS, ins,
            f"pattern has {len(pairs)} dims; it has 1 to {MAX_FREE_DIMS}")
    for step, num in pairs:
        require(1 <= num <= PATTERN_NUM_MAX, ins,
                f"pattern dim ({step}, {num}): num must be 1..{PATTERN_NUM_MAX}")
    n = math.prod(num for _, num in pairs)
    require(n == ins.dst.free_size, ins, f"pattern {list(pairs)} generates {n} values per partition but "
            f"dst has {ins.dst.free_size} elements per partition")
    ints = {k: ins.imm.get(k, 0) for k in ("offset", "channel_multiplier")}
    for k, v in ints.items():
        require(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and INT32_MIN <= v <= INT32_MAX,
                ins, f"{k}={v!r} must be an int32")
    reaches = [(ins.dst.partitions - 1) * int(ints["channel_multiplier"])]
    reaches += [step * (num - 1) for step, num in pairs]
    lo = int(ints["offset"]) + sum(min(0, r) for r in reaches)
    hi = int(ints["offset"]) + sum(max(0, r) for r in reaches)
    require(INT32_MIN <= lo and hi <= INT32_MAX, ins,
            f"the affine values span {lo}..{hi}, outside int32 (GpSimd computes them in 32-bit integers)")


def _packed_pattern(ins: Instruction) -> list[int]:
    pairs = list(_pattern(ins)) + [(0, 1)] * (MAX_FREE_DIMS - len(_pattern(ins)))
    return [(step << _NUM_BITS) | num for step, num in pairs]


def affine_values_np(ins: Instruction) -> np.ndarray:
    """int64 [P, N]: the affine expression at every dst element (see the module docstring)."""
    values = np.array([int(ins.imm.get("offset", 0))], dtype=np.int64)
    for step, num in _pattern(ins):
        values = (values[:, None] + np.arange(num, dtype=np.int64) * step).reshape(-1)
    parts = np.arange(ins.dst.partitions, dtype=np.int64)[:, None]
    return values[None, :] + parts * int(ins.imm.get("channel_multiplier", 0))


@njit(cache=True)
def _affine_values(row, parts):
    offset, multiplier = row[IMM], row[IMM + 1]
    steps = np.empty(4, dtype=np.int64)
    nums = np.empty(4, dtype=np.int64)
    for d in range(4):
        nums[d] = row[IMM + 2 + d] & _NUM_MASK
        steps[d] = row[IMM + 2 + d] >> _NUM_BITS
    out = np.empty((parts, nums[0] * nums[1] * nums[2] * nums[3]), dtype=np.int64)
    for p in range(parts):
        j = 0
        base = offset + p * multiplier
        for i0 in range(nums[0]):
            v0 = base + i0 * steps[0]
            for i1 in range(nums[1]):
                v1 = v0 + i1 * steps[1]
                for i2 in range(nums[2]):
                    v2 = v1 + i2 * steps[2]
                    for i3 in range(nums[3]):
                        out[p, j] = v2 + i3 * steps[3]
                        j += 1
    return out


def _affine_immediates(ins: Instruction) -> list[int]:
    return [int(ins.imm.get("offset", 0)), int(ins.imm.get("channel_multiplier", 0)), *_packed_pattern(ins)]


# ---------------------------------------------------------------- iota

_PATTERN_IMM = frozenset({"pattern", "offset", "channel_multiplier"})


def _check_iota(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _PATTERN_IMM)
    require_operands(ins, 0)
    _check_pattern(ins)


def _ref_iota(ins: Instruction, mem: RefMemory) -> None:
    """dst = value(p, i) (S16). Integer dtypes store the integer (saturating to the dtype's range);
    float dtypes store it converted to fp32 (exact up to 2**24) and rounded once to the dtype."""
    values = affine_values_np(ins)
    if ins.dst.dtype.is_int:
        mem.write_int(ins.dst, values)
    else:
        mem.write(ins.dst, values.astype(np.float32))


@njit(cache=True)
def _nb_iota(row, frow, bases):
    values = _affine_values(row, row[DST + F_PARTS])
    if _IS_INT[row[DST + F_DTYPE]]:
        scatter_i64(row, DST, bases, values)
    else:
        scatter_f32(row, DST, bases, values.astype(np.float32))




# ---------------------------------------------------------------- affine_select

def _check_affine_select(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _PATTERN_IMM | {"cmp_op", "on_false_value"})
    require_operands(ins, 1)
    require_same_shape(ins, ins.dst, ins.srcs[0], "dst", "on_true")
    _check_pattern(ins)
    op = alu_immediate(ins, "cmp_op", AluOp.equal)
    require(op in COMPARE_OPS, ins, f"cmp_op={op.name} is not a comparison; allowed: "
            f"{', '.join(sorted(o.name for o in COMPARE_OPS))}")
    value = ins.imm.get("on_false_value")
    require(isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool), ins,
            f"on_false_value={value!r} must be a number (an fp32 scalar)")


def _compare_np(op: AluOp, values: np.ndarray) -> np.ndarray:
    return {
        AluOp.equal: values == 0, AluOp.not_equal: values != 0, AluOp.greater: values > 0,
        AluOp.greater_equal: values >= 0, AluOp.less: values < 0, AluOp.less_equal: values <= 0,
    }[op]


def _false_raw(ins: Instruction) -> np.ndarray:
    """on_false_value as fp32, stored in dst's dtype: a [1, 1] array of that host dtype."""
    return encode(np.array([[ins.imm["on_false_value"]]], dtype=np.float32), int(ins.dst.dtype))


def _ref_affine_select(ins: Instruction, mem: RefMemory) -> None:
    """dst = on_true where cmp_op(value(p, i), 0), else on_false_value (S16). When dst and on_true
    share a dtype the selected elements move bit for bit; otherwise through fp32 (S16)."""
    keep = _compare_np(alu_immediate(ins, "cmp_op", AluOp.equal), affine_values_np(ins))
    on_true = ins.srcs[0]
    if on_true.dtype == ins.dst.dtype:
        mem.write_raw(ins.dst, np.where(keep, mem.read_raw(on_true), _false_raw(ins)))
    else:
        mem.write(ins.dst, np.where(keep, mem.read(on_true), np.float32(ins.imm["on_false_value"])))


def _enc_affine_select(ins: Instruction) -> tuple[list[int], list[float]]:
    raw = _false_raw(ins)
    bits = int(raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[raw.itemsize])[0, 0])
    ints = _affine_immediates(ins) + [int(alu_immediate(ins, "cmp_op", AluOp.equal)), bits]
    return ints, [float(ins.imm["on_false_value"])]


_MAXIMUM = int(AluOp.maximum)
_EQ, _NE, _GT, _GE, _LT = (int(AluOp.equal), int(AluOp.not_equal), int(AluOp.greater),
                           int(AluOp.greater_equal), int(AluOp.less))


@njit(cache=True, inline="always")
def _compare(op, v):
    if op == _EQ:
        return v == 0
    if op == _NE:
        return v != 0
    if op == _GT:
        return v > 0
    if op == _GE:
        return v >= 0
    if op == _LT:
        return v < 0
    return v <= 0


@njit(cache=True)
def _nb_affine_select(row, frow, bases):
    values = _affine_values(row, row[DST + F_PARTS])
    op = row[IMM + 6]
    if row[DST + F_DTYPE] == row[SRC0 + F_DTYPE]:
        raw = gather_raw(row, SRC0, bases)
        for p in range(raw.shape[0]):
            for j in range(raw.shape[1]):
                if not _compare(op, values[p, j]):
                    raw[p, j] = row[IMM + 7]
        scatter_raw(row, DST, bases, raw)
    else:
        x = gather_f32(row, SRC0, bases)
        false_value = np.float32(frow[0])
        for p in range(x.shape[0]):
            for j in range(x.shape[1]):
                if not _compare(op, values[p, j]):
                    x[p, j] = false_value
        scatter_f32(row, DST, bases, x)


# ---------------------------------------------------------------- tensor_partition_reduce

def _check_partition_reduce(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"op"}))
    require_operands(ins, 1)
    data, dst = ins.srcs[0], ins.dst
    op = alu_immediate(ins, "op")
    require(op in PARTITION_REDUCE_OPS, ins, f"op={op.name} is not allowed here; allowed: "
            f"{', '.join(sorted(o.name for o in PARTITION_REDUCE_OPS))}")
    require(dst.partitions == 1 and dst.free_size == data.free_size, ins,
            f"dst is {dst.partitions}x{dst.free_size} (partitions x free) but must be 1x{data.free_size}")
    if op in BITVEC_ALU_OPS:
        for ap, role in ((data, "data"), (dst, "dst")):
            if not ap.dtype.is_int:
                raise fail(ins, f"{role} dtype {ap.dtype.name} is not an integer dtype; {op.name} treats "
                           f"elements as bit patterns", DtypeError)


def _cycles_partition_reduce(ins: Instruction, chip: ChipSpec) -> float:
    """Not documented; assumed GPSIMD_START + N * ceil(P / 16): each GpSimd core serves 16
    partitions (S9) and the fold across them costs one pass over the free dim per 16 partitions."""
    data = ins.srcs[0]
    groups = math.ceil(data.partitions / PARTITIONS_PER_GPSIMD_CORE)
    return float(chip.gpsimd_start_cycles + data.free_size * groups)


_PR_FLOAT, _PR_BITVEC, _PR_NATIVE_INT = 0, 1, 2


def _partition_reduce_mode(ins: Instruction) -> int:
    """Bit operators work on the integers; add/max on int32/uint32 data and dst use GpSimd's native
    32-bit integer arithmetic (S9, as tensor_tensor on GpSimd: ``alu.native_int``); the rest is fp32."""
    if alu_immediate(ins, "op") in BITVEC_ALU_OPS:
        return _PR_BITVEC
    if ins.srcs[0].dtype in NATIVE_INT_DTYPES and ins.dst.dtype in NATIVE_INT_DTYPES:
        return _PR_NATIVE_INT
    return _PR_FLOAT


def _ref_partition_reduce(ins: Instruction, mem: RefMemory) -> None:
    """dst[0, j] = op folded over partitions 0, 1, ..., P-1 of data[:, j], in partition order,
    starting from op's identity; integer results wrap to dst's width."""
    data, dst = ins.srcs[0], ins.dst
    op = alu_immediate(ins, "op")
    mode = _partition_reduce_mode(ins)
    if mode != _PR_FLOAT:
        x = mem.read_int(data)
        first = {AluOp.bitwise_and: -1, AluOp.maximum: np.iinfo(np.int64).min}.get(op, 0)
        acc = np.full((1, x.shape[1]), first, dtype=np.int64)
        for p in range(x.shape[0]):
            if mode == _PR_BITVEC:
                acc = alu_int_np(op, acc, x[p:p + 1], dst.dtype)
            else:
                acc = native_int_np(op, acc, x[p:p + 1], dst.dtype)
        mem.write_int(dst, acc)
        return
    x = mem.read(data)
    acc = np.full((1, x.shape[1]), -0.0 if op is AluOp.add else -np.inf, dtype=np.float32)
    for p in range(x.shape[0]):
        acc = alu_np(op, acc, x[p:p + 1])
    mem.write(dst, acc)


def _enc_partition_reduce(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(alu_immediate(ins, "op")), _partition_reduce_mode(ins)], []


_I64_MIN = np.iinfo(np.int64).min


@njit(cache=True)
def _nb_partition_reduce(row, frow, bases):
    op, mode = row[IMM], row[IMM + 1]
    if mode != _PR_FLOAT:
        xi = gather_i64(row, SRC0, bases)
        code = row[DST + F_DTYPE]
        acc_i = np.empty((1, xi.shape[1]), dtype=np.int64)
        for j in range(xi.shape[1]):
            a = identity_int(op) if mode == _PR_BITVEC else (_I64_MIN if op == _MAXIMUM else np.int64(0))
            for p in range(xi.shape[0]):
                if mode == _PR_BITVEC:
                    a = alu_int(op, a, xi[p, j], code)
                else:
                    a = native_int(op, a, xi[p, j], code)
            acc_i[0, j] = a
        scatter_i64(row, DST, bases, acc_i)
        return
    x = gather_f32(row, SRC0, bases)
    acc = np.empty((1, x.shape[1]), dtype=np.float32)
    for j in range(x.shape[1]):
        a = identity_f32(op)
        for p in range(x.shape[0]):
            a = alu_f32(op, a, x[p, j])
        acc[0, j] = a
    scatter_f32(row, DST, bases, acc)


def _enc_iota(ins: Instruction) -> tuple[list[int], list[float]]:
    return _affine_immediates(ins), []


OPS = [
    OpDef(Opcode.IOTA, _check_iota, _gpsimd_start_plus_n, _ref_iota, _enc_iota, _nb_iota),
    OpDef(Opcode.AFFINE_SELECT, _check_affine_select, _gpsimd_start_plus_n, _ref_affine_select,
          _enc_affine_select, _nb_affine_select),
    OpDef(Opcode.TENSOR_PARTITION_REDUCE, _check_partition_reduce, _cycles_partition_reduce,
          _ref_partition_reduce, _enc_partition_reduce, _nb_partition_reduce),
]
