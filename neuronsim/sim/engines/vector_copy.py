"""Moving and choosing data: tensor_copy, memset, tensor_copy_predicated and select — checks,
semantics (numpy reference and Numba) and costs side by side. All run on VectorE; tensor_copy also
on ScalarE and GpSimd, memset also on GpSimd (``ir.OPCODE_ENGINES``).

Numerics, identical in both executors: tensor_copy is bit-exact when src and dst dtypes match, else
src -> fp32 -> dst (S16, S10: on v3+ ScalarE too). tensor_copy_predicated copies bits (src and dst
share a dtype, S16) where ``(predicate != 0) xor reverse_pred`` and leaves the other dst bits
untouched. select writes ``on_true`` where ``predicate != 0`` else ``on_false``, bit-exact when all
three share a dtype, through fp32 otherwise. memset writes an integer value exactly into an integer
dtype (saturating), any other value as fp32 rounded to the dtype.

Costs, in cycles of the issuing engine (S23 table in trainium-hardware.md §2.8, v3 perf modes
§2.3; every number from the ChipSpec), N = elements per partition, then the stride penalty and
``max(MIN_II, ...)`` (``common.elementwise_cycles``):

- VectorE tensor_copy: ``N``; perf mode (16-bit float src and dst) divides N by
  ``vector_perf_mode_sbuf_16bit_speedup`` when both are in SBUF with a contiguous innermost dim,
  else by ``vector_perf_mode_other_16bit_speedup``. ScalarE: ``N / scalar_engine_16bit_speedup``
  for 16-bit float in and out, else ``N`` (S23, S11). GpSimd: ``N``.
- memset: ``N/2`` for a zero into bf16/fp16 on VectorE, else ``N``.
- tensor_copy_predicated: ``N`` if exactly one of src and predicate is in PSUM, else ``2N``.
- select: ``2N`` (two data inputs, as tensor_tensor; not in the table).

Kernels stream the tile through blocks of partitions (see ``alu.py``); same-dtype copies go by
memcpy runs where the two sides share a loop nest (``access.copy_by_runs``), and raw 4-byte selects
write dst row by row.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numba import carray, njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    flag,
    no_immediates,
    require,
    require_free_limit,
    require_known_immediates,
    require_not_both_psum,
    require_operands,
    require_same_shape,
    scalar_speedup,
    vector_perf_speedup,
)
from neuronsim.sim.ir import AccessPattern, Engine, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import (
    F_DTYPE,
    ITEMSIZE,
    ap_free,
    ap_parts,
    block_rows,
    load_rows_f32,
    load_rows_i64,
    load_rows_raw,
    row_address,
    row_offsets,
    same_or_disjoint,
    store_rows_f32,
    store_rows_i64,
    store_rows_raw,
    u8_ptr,
    u16_ptr,
    u32_ptr,
    u32_row,
    u32_rows,
)
from neuronsim.sim.memory.copy import copy_by_runs
from neuronsim.sim.memory.numerics import load_u8, load_u16, load_u32
from neuronsim.sim.memory.reference import RefMemory

PREDICATE_DTYPES = frozenset({DType.uint8, DType.uint16, DType.uint32, DType.bool_})  # S16


# ---------------------------------------------------------------- tensor_copy

def _check_tensor_copy(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    require_same_shape(ins, ins.dst, ins.srcs[0], "dst", "src")
    require_free_limit(ins, chip)


def _cycles_tensor_copy(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE ``N / perf-mode speedup`` (S23, S10); ScalarE ``N / scalar_engine_16bit_speedup`` for
    16-bit in+out (S23, S11); GpSimd ``N`` (S23). Stride penalty; ``max(MIN_II, .)``."""
    src, dst = ins.srcs[0], ins.dst
    n = src.free_size
    if ins.engine is Engine.VECTOR:
        return elementwise_cycles(ins, chip, n, vector_perf_speedup(src, dst, chip))
    if ins.engine is Engine.SCALAR:
        return elementwise_cycles(ins, chip, n, scalar_speedup(src, dst, chip))
    return elementwise_cycles(ins, chip, n)


def _ref_tensor_copy(ins: Instruction, mem: RefMemory) -> None:
    src = ins.srcs[0]
    if src.dtype == ins.dst.dtype:
        mem.copy(ins.dst, src)
    else:
        mem.write(ins.dst, mem.read(src))


@njit(cache=True)
def _nb_tensor_copy(row, frow, bases):
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, offd = row_offsets(row, SRC0), row_offsets(row, DST)
    block = block_rows(parts, n)
    if row[DST + F_DTYPE] == row[SRC0 + F_DTYPE]:
        if copy_by_runs(row, DST, SRC0, bases):
            return
        bitsb = np.empty(block * n, dtype=np.int64)
        for p0 in range(0, parts, block):
            bits = bitsb[:min(block, parts - p0) * n]
            load_rows_raw(row, SRC0, bases, p0, offs, bits)
            store_rows_raw(row, DST, bases, p0, offd, bits)
    else:
        xb = np.empty(block * n, dtype=np.float32)
        for p0 in range(0, parts, block):
            x = xb[:min(block, parts - p0) * n]
            load_rows_f32(row, SRC0, bases, p0, offs, x)
            store_rows_f32(row, DST, bases, p0, offd, x)


# ---------------------------------------------------------------- memset

def _memset_int_value(ins: Instruction) -> int | None:
    """The value as an integer when it is stored exactly: a whole number into an integer dtype."""
    value = float(ins.imm["value"])
    if ins.dst.dtype.is_int and math.isfinite(value) and value == int(value) and abs(value) < 2**63:
        return int(ins.imm["value"]) if isinstance(ins.imm["value"], numbers.Integral) else int(value)
    return None


def _check_memset(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"value"}))
    require_operands(ins, 0)
    value = ins.imm.get("value")
    require(isinstance(value, numbers.Real), ins, f"value={value!r} must be a number")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        require(abs(int(value)) < 2**63, ins, f"value={value} does not fit 64 bits")
    require_free_limit(ins, chip)


def _cycles_memset(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE (S23): ``N/2`` for zero into bf16/fp16, else ``N``; GpSimd ``N``. Stride penalty;
    ``max(MIN_II, .)``."""
    n = ins.dst.free_size
    value = float(ins.imm["value"])
    zero = value == 0 and math.copysign(1.0, value) > 0  # +0.0: all-zero bits
    if ins.engine is Engine.VECTOR and zero and ins.dst.dtype.is_16bit_float:
        return elementwise_cycles(ins, chip, n / 2)
    return elementwise_cycles(ins, chip, n)


def _ref_memset(ins: Instruction, mem: RefMemory) -> None:
    dst = ins.dst
    exact = _memset_int_value(ins)
    if exact is not None:
        mem.write_int(dst, np.full((dst.partitions, dst.free_size), exact, dtype=np.int64))
    else:
        with np.errstate(over="ignore"):  # beyond fp32: inf
            value = np.float32(float(ins.imm["value"]))
        mem.write(dst, np.full((dst.partitions, dst.free_size), value, dtype=np.float32))


def _encode_memset(ins: Instruction) -> tuple[list[int], list[float]]:
    exact = _memset_int_value(ins)
    if exact is not None:
        return [1, exact], [0.0]
    return [0, 0], [float(ins.imm["value"])]


@njit(cache=True)
def _nb_memset(row, frow, bases):
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offd = row_offsets(row, DST)
    block = block_rows(parts, n)
    if row[IMM] == 1:
        vi = np.full(block * n, row[IMM + 1], dtype=np.int64)
        for p0 in range(0, parts, block):
            store_rows_i64(row, DST, bases, p0, offd, vi[:min(block, parts - p0) * n])
    else:
        vf = np.full(block * n, np.float32(frow[0]), dtype=np.float32)
        for p0 in range(0, parts, block):
            store_rows_f32(row, DST, bases, p0, offd, vf[:min(block, parts - p0) * n])


# ---------------------------------------------------------------- tensor_copy_predicated

def _check_copy_predicated(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"reverse_pred"}))
    require_operands(ins, 2)
    src, predicate = ins.srcs
    require_same_shape(ins, ins.dst, src, "dst", "src")
    require_same_shape(ins, predicate, src, "predicate", "src")
    if predicate.dtype not in PREDICATE_DTYPES:
        raise fail(ins, f"predicate is {predicate.dtype.name}; it must be one of "
                   f"{sorted(d.name for d in PREDICATE_DTYPES)} (S16)", DtypeError)
    if src.dtype != ins.dst.dtype:
        raise fail(ins, f"src is {src.dtype.name} but dst is {ins.dst.dtype.name}; tensor_copy_predicated "
                   "needs one dtype on both (S16)", DtypeError)
    require_not_both_psum(ins, src, predicate, "src and predicate")
    require_free_limit(ins, chip)


def _cycles_copy_predicated(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``N`` if one of src and predicate is in PSUM, ``2N`` if both are in SBUF. Stride
    penalty; ``max(MIN_II, .)``."""
    src, predicate = ins.srcs
    one_in_psum = (src.memory is Memory.PSUM) != (predicate.memory is Memory.PSUM)
    n = src.free_size
    return elementwise_cycles(ins, chip, n if one_in_psum else 2 * n)


def _ref_copy_predicated(ins: Instruction, mem: RefMemory) -> None:
    src, predicate = ins.srcs
    take = (mem.read_int(predicate) != 0) != flag(ins, "reverse_pred")
    old = mem.read_raw(ins.dst)
    mem.write_raw(ins.dst, np.where(take, mem.read_raw(src), old))


def _encode_copy_predicated(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(flag(ins, "reverse_pred"))], []


@njit(cache=True)
def _nb_copy_predicated(row, frow, bases):
    reverse = row[IMM] != 0
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, offp, offd = row_offsets(row, SRC0), row_offsets(row, SRC1), row_offsets(row, DST)
    block = block_rows(parts, n)
    bitsb = np.empty(block * n, dtype=np.int64)
    predb = np.empty(block * n, dtype=np.int64)
    oldb = np.empty(block * n, dtype=np.int64)
    for p0 in range(0, parts, block):
        m = min(block, parts - p0) * n
        bits, pred, old = bitsb[:m], predb[:m], oldb[:m]
        load_rows_raw(row, SRC0, bases, p0, offs, bits)
        load_rows_i64(row, SRC1, bases, p0, offp, pred)
        load_rows_raw(row, DST, bases, p0, offd, old)
        for j in range(m):
            if (pred[j] != 0) == reverse:
                bits[j] = old[j]
        store_rows_raw(row, DST, bases, p0, offd, bits)


# ---------------------------------------------------------------- select

def _check_select(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 3)
    predicate, on_true, on_false = ins.srcs
    require_same_shape(ins, ins.dst, on_true, "dst", "on_true")
    require_same_shape(ins, predicate, on_true, "predicate", "on_true")
    require_same_shape(ins, on_false, on_true, "on_false", "on_true")
    if not predicate.dtype.is_int:
        raise fail(ins, f"predicate is {predicate.dtype.name}; it must be an integer dtype (S16)", DtypeError)
    in_psum = [ap.describe() for ap in ins.srcs if ap.memory is Memory.PSUM]
    require(len(in_psum) <= 1, ins, f"at most one input may be in PSUM; {', '.join(in_psum)} are")
    require_free_limit(ins, chip)


def _cycles_select(ins: Instruction, chip: ChipSpec) -> float:
    """``2N`` (two data inputs, as tensor_tensor; not in S23). Stride penalty; ``max(MIN_II, .)``."""
    return elementwise_cycles(ins, chip, 2 * ins.dst.free_size)


def _select_is_raw(dst: AccessPattern, on_true: AccessPattern, on_false: AccessPattern) -> bool:
    return on_true.dtype == dst.dtype and on_false.dtype == dst.dtype


def _ref_select(ins: Instruction, mem: RefMemory) -> None:
    predicate, on_true, on_false = ins.srcs
    take = mem.read_int(predicate) != 0
    if _select_is_raw(ins.dst, on_true, on_false):
        mem.write_raw(ins.dst, np.where(take, mem.read_raw(on_true), mem.read_raw(on_false)))
    else:
        mem.write(ins.dst, np.where(take, mem.read(on_true), mem.read(on_false)))


def _encode_select(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(_select_is_raw(ins.dst, ins.srcs[1], ins.srcs[2]))], []


_MIN_ROW_ELEMENTS = 64  # shorter rows go through the block path, which has no per-row setup


@njit(cache=True, inline="always")
def _bits_row(row, at, bases, p, offsets, scratch):
    """Partition ``p`` of a 4-byte AP as uint32 bits: a view of memory when its row is contiguous
    and aligned (partitions may overlap: this is for reading), else gathered into ``scratch``."""
    addr = row_address(row, at, bases, p)
    if offsets.size == 0 and addr % 4 == 0:
        return carray(u32_ptr(addr), (scratch.size,))
    for j in range(scratch.size):
        scratch[j] = load_u32(addr + offsets[j] if offsets.size else addr + 4 * j)
    return scratch


@njit(cache=True, inline="always")
def _nonzero_row(row, at, bases, p, offsets, out):
    """``out[j]`` = element j of partition ``p`` of an integer AP, nonzero exactly when the
    element's value is (its raw bits; any nonzero bool byte is true)."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    addr = row_address(row, at, bases, p)
    n = out.size
    if offsets.size == 0 and item == 1:
        v8 = carray(u8_ptr(addr), (n,))
        for j in range(n):
            out[j] = v8[j]
    elif offsets.size == 0 and item == 2 and addr % 2 == 0:
        v16 = carray(u16_ptr(addr), (n,))
        for j in range(n):
            out[j] = v16[j]
    elif offsets.size == 0 and item == 4 and addr % 4 == 0:
        v32 = carray(u32_ptr(addr), (n,))
        for j in range(n):
            out[j] = v32[j]
    elif item == 1:  # strided or unaligned: one loop per width (no dtype switch inside a loop,
        for j in range(n):  # the code shape LLVM once miscompiled in Numba's cached objects)
            out[j] = load_u8(addr + (offsets[j] if offsets.size else j))
    elif item == 2:
        for j in range(n):
            out[j] = load_u16(addr + (offsets[j] if offsets.size else 2 * j))
    else:
        for j in range(n):
            out[j] = load_u32(addr + (offsets[j] if offsets.size else 4 * j))


@njit(cache=True)
def _select_rows_u32(row, bases, offp, offt, offf):
    """Raw select of 4-byte data partition by partition, straight into dst's rows; dst must have
    contiguous, aligned, non-overlapping rows and each source be dst's very elements or share no
    byte with it (then the row order is invisible). False when it does not apply, or when rows
    are too short to repay the per-row setup (~50 ns: array views and their reference counts)."""
    o = u32_rows(row, DST, bases, row_offsets(row, DST))
    if o.shape[1] < _MIN_ROW_ELEMENTS or ITEMSIZE[row[SRC1 + F_DTYPE]] != 4:
        return False
    for at in (SRC0, SRC1, SRC2):
        if not same_or_disjoint(row, at, DST, bases):
            return False
    n = o.shape[1]
    pred, ts, fs = np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint32)
    for p in range(o.shape[0]):
        _nonzero_row(row, SRC0, bases, p, offp, pred)
        t = _bits_row(row, SRC1, bases, p, offt, ts)
        f = _bits_row(row, SRC2, bases, p, offf, fs)
        d = u32_row(o, p)
        for j in range(n):
            d[j] = t[j] if pred[j] != 0 else f[j]
    return True


@njit(cache=True)
def _nb_select(row, frow, bases):
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offp, offt, offf = row_offsets(row, SRC0), row_offsets(row, SRC1), row_offsets(row, SRC2)
    offd = row_offsets(row, DST)
    block = block_rows(parts, n)
    if row[IMM] == 1 and _select_rows_u32(row, bases, offp, offt, offf):
        return
    predb = np.empty(block * n, dtype=np.int64)
    if row[IMM] == 1:
        ab = np.empty(block * n, dtype=np.int64)
        bb = np.empty(block * n, dtype=np.int64)
        for p0 in range(0, parts, block):
            m = min(block, parts - p0) * n
            pred, a, b = predb[:m], ab[:m], bb[:m]
            load_rows_i64(row, SRC0, bases, p0, offp, pred)
            load_rows_raw(row, SRC1, bases, p0, offt, a)
            load_rows_raw(row, SRC2, bases, p0, offf, b)
            for j in range(m):
                if pred[j] == 0:
                    a[j] = b[j]
            store_rows_raw(row, DST, bases, p0, offd, a)
        return
    xb = np.empty(block * n, dtype=np.float32)
    yb = np.empty(block * n, dtype=np.float32)
    for p0 in range(0, parts, block):
        m = min(block, parts - p0) * n
        pred, x, y = predb[:m], xb[:m], yb[:m]
        load_rows_i64(row, SRC0, bases, p0, offp, pred)
        load_rows_f32(row, SRC1, bases, p0, offt, x)
        load_rows_f32(row, SRC2, bases, p0, offf, y)
        for j in range(m):
            if pred[j] == 0:
                x[j] = y[j]
        store_rows_f32(row, DST, bases, p0, offd, x)


OPS = [
    OpDef(Opcode.TENSOR_COPY, _check_tensor_copy, _cycles_tensor_copy, _ref_tensor_copy,
          no_immediates, _nb_tensor_copy),
    OpDef(Opcode.MEMSET, _check_memset, _cycles_memset, _ref_memset, _encode_memset, _nb_memset),
    OpDef(Opcode.TENSOR_COPY_PREDICATED, _check_copy_predicated, _cycles_copy_predicated,
          _ref_copy_predicated, _encode_copy_predicated, _nb_copy_predicated),
    OpDef(Opcode.SELECT, _check_select, _cycles_select, _ref_select, _encode_select, _nb_select),
]
