"""VectorE folds: tensor_reduce, tensor_tensor_scan and tensor_scalar_cumulative — checks,
semantics (numpy reference and Numba) and costs side by side. The statistics (bn_stats, bn_aggr)
are in ``vector_bn.py``, max8 and nc_find_index8 in ``vector_top_k.py``.

Numerics, identical in both executors: sources are read as fp32, every arithmetic step is one fp32
operation rounded once (``alu_f32`` / ``alu_np``), and folds run left to right along the free dim
(row-major over the free dims of the access pattern), from the operator's identity
(``alu.identity_f32``). Results round to the destination dtype once, on the write. Bit operators
(tensor_reduce with a bitvec ``op``) work on the integer values instead and wrap to the destination's
width (``alu_int``).

Costs are the legacy per-instruction estimates (S23, trainium-hardware.md §2.8) in VectorE cycles,
with N the elements per partition of the (first) source.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.alu import (
    F32_IDENTITY,
    INT_IDENTITY,
    alu_f32,
    alu_int,
    alu_int_np,
    alu_np,
    identity_f32,
    identity_int,
    max_f32,
    min_f32,
)
from neuronsim.sim.engines.common import (
    OpDef,
    alu_immediate,
    flag,
    max_ii,
    require,
    require_alu,
    require_dtype,
    require_int,
    require_known_immediates,
    require_operands,
    require_same_shape,
    require_shape,
    require_vector_free,
)
from neuronsim.sim.ir import (
    BITVEC_ALU_OPS,
    REDUCE_ALU_OPS,
    UNARY_ALU_OPS,
    AluOp,
    Instruction,
    Memory,
    Opcode,
)
from neuronsim.sim.memory.access import (
    F_DTYPE,
    ap_free,
    ap_parts,
    f32_rows,
    gather_f32,
    gather_i64,
    row_offsets,
    scatter_f32,
    scatter_i64,
)
from neuronsim.sim.memory.reference import RefMemory

_ADD, _MAX, _MIN = int(AluOp.add), int(AluOp.maximum), int(AluOp.minimum)


# ---------------------------------------------------------------- tensor_reduce

def _reduced_group(ins: Instruction) -> int:
    """Elements folded into each result: the product of the trailing ``num_axes`` free dims."""
    free = ins.srcs[0].free_dims
    return math.prod(n for _, n in free[len(free) - int(ins.imm["num_axes"]):])


def _check_reduce(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"op", "num_axes", "negate"}))
    require_operands(ins, 1)
    data, dst = ins.srcs[0], ins.dst
    op = require_alu(ins, "op", REDUCE_ALU_OPS)
    require("num_axes" in ins.imm, ins,
            "needs the immediate 'num_axes' (how many trailing free dims to reduce)")
    n_free = len(data.free_dims)
    num_axes = ins.imm["num_axes"]
    require(isinstance(num_axes, int) and 1 <= num_axes <= n_free, ins,
            f"num_axes={num_axes!r}: tensor_reduce reduces 1 to {n_free} trailing free dims of "
            f"{data.describe()}")
    kept = data.free_size // _reduced_group(ins)
    require_shape(ins, dst, data.partitions, kept, "dst")
    require_vector_free(ins, chip, data, "data")
    if op in BITVEC_ALU_OPS:
        why = f"{op.name} treats elements as bit patterns"
        require_int(ins, data, "data", why)
        require_int(ins, dst, "dst", why)
        require(not flag(ins, "negate"), ins, f"negate applies to arithmetic reductions, not {op.name}")


def _cycles_reduce(ins: Instruction, chip: ChipSpec) -> float:
    """S23: N/2 if bf16 in and out with add/max, else N."""
    n = ins.srcs[0].free_size
    fast = (ins.srcs[0].dtype is DType.bfloat16 and ins.dst.dtype is DType.bfloat16
            and alu_immediate(ins, "op") in (AluOp.add, AluOp.maximum))
    return n / 2 if fast else float(n)


def _ref_reduce(ins: Instruction, mem: RefMemory) -> None:
    data, dst = ins.srcs[0], ins.dst
    op = alu_immediate(ins, "op")
    group = _reduced_group(ins)
    if op in BITVEC_ALU_OPS:
        x = mem.read_int(data).reshape(data.partitions, -1, group)
        acc = np.full(x.shape[:2], INT_IDENTITY[op], dtype=np.int64)
        for r in range(group):
            acc = alu_int_np(op, acc, x[:, :, r], dst.dtype)
        mem.write_int(dst, acc)
        return
    x = mem.read(data).reshape(data.partitions, -1, group)
    acc = np.full(x.shape[:2], F32_IDENTITY[op], dtype=np.float32)
    for r in range(group):
        acc = alu_np(op, acc, x[:, :, r])
    mem.write(dst, -acc if flag(ins, "negate") else acc)


def _enc_reduce(ins: Instruction) -> tuple[list[int], list[float]]:
    op = alu_immediate(ins, "op")
    return [int(op), _reduced_group(ins), int(flag(ins, "negate")), int(op in BITVEC_ALU_OPS)], []


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
_SCAN_IMMEDIATES = frozenset({"op0", "op1", "initial", "initial_is_tile", "reverse0", "reverse1"})


def _check_scan(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _SCAN_IMMEDIATES)
    tile = flag(ins, "initial_is_tile")
    require_operands(ins, 3 if tile else 2)
    data0, data1, dst = ins.srcs[0], ins.srcs[1], ins.dst
    require_alu(ins, "op0", _SCAN_OPS)
    require_alu(ins, "op1", _SCAN_OPS)
    require_same_shape(ins, data0, data1, "data0", "data1")
    require_same_shape(ins, dst, data0, "dst", "data0")
    require(not (data0.memory is Memory.PSUM and data1.memory is Memory.PSUM), ins,
            "data0 and data1 cannot both be in PSUM")
    if tile:
        require_shape(ins, ins.srcs[2], data0.partitions, 1, "the initial tile")
    else:
        require(isinstance(ins.imm.get("initial", 0.0), (int, float)), ins,
                f"initial={ins.imm.get('initial')!r} must be a number (or pass a [P, 1] tile)")
    require_vector_free(ins, chip, data0, "data0")
    require_vector_free(ins, chip, data1, "data1")


def _cycles_scan(ins: Instruction, chip: ChipSpec) -> float:
    """S23: max(MIN_II, 2N) — two input tensors."""
    return max_ii(2 * ins.srcs[0].free_size, chip)


def _ref_scan(ins: Instruction, mem: RefMemory) -> None:
    """result[i] = op1(op0(data0[i], result[i-1]), data1[i]), result[-1] = initial (S16). The state
    carried from step to step is the fp32 result, before the rounding to dst's dtype."""
    d0, d1 = mem.read(ins.srcs[0]), mem.read(ins.srcs[1])
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1")
    rev0, rev1 = flag(ins, "reverse0"), flag(ins, "reverse1")
    if flag(ins, "initial_is_tile"):
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
    ints = [int(alu_immediate(ins, "op0")), int(alu_immediate(ins, "op1")), int(flag(ins, "reverse0")),
            int(flag(ins, "reverse1")), int(flag(ins, "initial_is_tile"))]
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


# ---------------------------------------------------------------- tensor_scalar_cumulative

_CUMULATIVE_OPS = frozenset({AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.maximum, AluOp.minimum})
_CUMULATIVE_IMMEDIATES = frozenset({"op0", "op1", "imm0", "imm0_is_tile", "imm1", "imm1_is_tile", "reverse0",
                                    "load"})
# S16: "BF16, FP16, FP32, FP8, UINT8, UINT16, INT8, INT16"; INT32/UINT32 are an ISA limitation
_CUMULATIVE_DTYPES = frozenset({DType.bfloat16, DType.float16, DType.float32, DType.float8_e4m3,
                                DType.float8_e4m3fn, DType.float8_e5m2, DType.uint8, DType.uint16,
                                DType.int8, DType.int16})
# S16's reset values: 0 for add/subtract, 1 for mult, -inf for max, +inf for min
_CUMULATIVE_RESET = {AluOp.add: 0.0, AluOp.subtract: 0.0, AluOp.multiply: 1.0, AluOp.maximum: -math.inf,
                     AluOp.minimum: math.inf}


def _check_cumulative(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _CUMULATIVE_IMMEDIATES)
    tiles = int(flag(ins, "imm0_is_tile")) + int(flag(ins, "imm1_is_tile"))
    require_operands(ins, 1 + tiles)
    src, dst = ins.srcs[0], ins.dst
    require_alu(ins, "op0", _SCAN_OPS)
    require_alu(ins, "op1", _CUMULATIVE_OPS)
    for role, ap in (("src", src), ("dst", dst)):
        require_dtype(ins, ap, _CUMULATIVE_DTYPES, role)
    require_same_shape(ins, dst, src, "dst", "src")
    names = [name for name in ("imm0", "imm1") if flag(ins, f"{name}_is_tile")]
    for name, tile in zip(names, ins.srcs[1:], strict=True):
        require_shape(ins, tile, src.partitions, 1, f"the {name} tile")
        require_dtype(ins, tile, (DType.float32,), f"the {name} tile")
    require(flag(ins, "load") or not flag(ins, "imm1_is_tile") and ins.imm.get("imm1") is None, ins,
            "imm1 (the accumulator's initial value) is read only by load_reduce")
    require(not flag(ins, "load") or flag(ins, "imm1_is_tile")
            or isinstance(ins.imm.get("imm1"), (int, float)),
            ins, "load_reduce needs imm1, the accumulator's initial value")
    require_vector_free(ins, chip, src, "src")


def _cycles_cumulative(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed (S16 gives no figure): max(MIN_II, N), one pass over the source like tensor_scalar (S23)."""
    return max_ii(ins.srcs[0].free_size, chip)


def _cumulative_scalars(ins: Instruction, mem: RefMemory, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """imm0 and the accumulator's start per partition (fp32)."""
    tiles = iter(ins.srcs[1:])
    imm0 = (mem.read(next(tiles))[:, 0] if flag(ins, "imm0_is_tile")
            else np.full(parts, np.float32(ins.imm.get("imm0", 0.0)), np.float32))
    if flag(ins, "load"):
        start = (mem.read(next(tiles))[:, 0] if flag(ins, "imm1_is_tile")
                 else np.full(parts, np.float32(ins.imm["imm1"]), np.float32))
    else:
        start = np.full(parts, np.float32(_CUMULATIVE_RESET[alu_immediate(ins, "op1")]), np.float32)
    return imm0, start


def _ref_cumulative(ins: Instruction, mem: RefMemory) -> None:
    """S16: reg = op1(op0(src[i], imm0), reg) (op0(imm0, src[i]) with reverse0); dst[i] = reg. The
    register is fp32 from one step to the next; dst rounds each value once."""
    x = mem.read(ins.srcs[0])
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1")
    imm0, reg = _cumulative_scalars(ins, mem, x.shape[0])
    out = np.empty_like(x)
    for i in range(x.shape[1]):
        t = alu_np(op0, imm0, x[:, i]) if flag(ins, "reverse0") else alu_np(op0, x[:, i], imm0)
        reg = alu_np(op1, t, reg)
        out[:, i] = reg
    mem.write(ins.dst, out)


def _enc_cumulative(ins: Instruction) -> tuple[list[int], list[float]]:
    op1 = alu_immediate(ins, "op1")
    ints = [int(alu_immediate(ins, "op0")), int(op1), int(flag(ins, "reverse0")),
            int(flag(ins, "imm0_is_tile")), int(flag(ins, "load")), int(flag(ins, "imm1_is_tile"))]
    start = ins.imm["imm1"] if flag(ins, "load") and not flag(ins, "imm1_is_tile") else _CUMULATIVE_RESET[op1]
    return ints, [float(ins.imm.get("imm0", 0.0)), float(np.float32(start))]


@njit(cache=True)
def _nb_cumulative(row, frow, bases):
    op0, op1, rev0, tile0, load, tile1 = (row[IMM], row[IMM + 1], row[IMM + 2], row[IMM + 3], row[IMM + 4],
                                          row[IMM + 5])
    x = gather_f32(row, SRC0, bases)
    parts, n = x.shape
    imm0 = gather_f32(row, SRC1, bases) if tile0 else np.full((parts, 1), np.float32(frow[0]), np.float32)
    if load and tile1:
        start = gather_f32(row, SRC2 if tile0 else SRC1, bases)
    else:
        start = np.full((parts, 1), np.float32(frow[1]), np.float32)
    out = np.empty((parts, n), dtype=np.float32)
    for p in range(parts):
        reg = start[p, 0]
        for i in range(n):
            t = alu_f32(op0, imm0[p, 0], x[p, i]) if rev0 else alu_f32(op0, x[p, i], imm0[p, 0])
            reg = alu_f32(op1, t, reg)
            out[p, i] = reg
    scatter_f32(row, DST, bases, out)


OPS = [
    OpDef(Opcode.TENSOR_REDUCE, _check_reduce, _cycles_reduce, _ref_reduce, _enc_reduce, _nb_reduce),
    OpDef(Opcode.TENSOR_TENSOR_SCAN, _check_scan, _cycles_scan, _ref_scan, _enc_scan, _nb_scan),
    OpDef(Opcode.TENSOR_SCALAR_CUMULATIVE, _check_cumulative, _cycles_cumulative, _ref_cumulative,
          _enc_cumulative, _nb_cumulative),
]
