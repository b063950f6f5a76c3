"""tensor_scalar (``dst = (data op0 operand0) op1 operand1``) and scalar_tensor_tensor (``dst =
(data op0 operand0) op1 operand1_tensor``), each operand a number or a [P, 1] tile — checks,
semantics (numpy reference and Numba) and costs side by side. tensor_scalar runs on VectorE,
ScalarE and GpSimd; scalar_tensor_tensor on VectorE (``ir.OPCODE_ENGINES``).

Numerics, identical in both executors (the operators are ``alu.py``'s): every source is read as
fp32, each operator is one fp32 operation rounded once (``alu_f32`` / ``alu_np``), and the result
rounds to the destination dtype once, on the write. Float immediates are rounded to fp32 first.
``reverse`` flags swap an operator's inputs (``operand op data``), literally, unary operators
included. tensor_scalar's bit operators (``BITVEC_ALU_OPS``) need integer dtypes on every operand
and work on the integer values, wrapping to the destination's width; integer immediates must be
whole numbers, and an instruction never mixes bit and arithmetic operators.

Costs, in cycles of the issuing engine (S23 table in trainium-hardware.md §2.8, v3 perf modes
§2.3; every number from the ChipSpec), N = elements per partition, then the stride penalty and
``max(MIN_II, ...)`` (``common.elementwise_cycles``):

- VectorE tensor_scalar: ``N``; perf mode (16-bit float data and dst) divides N by
  ``vector_perf_mode_sbuf_16bit_speedup`` when both are in SBUF with a contiguous innermost dim,
  else by ``vector_perf_mode_other_16bit_speedup``. A reciprocal operator costs ``N *
  vector_reciprocal_cost_factor`` (S16-shared, 8N) with no perf mode.
- ScalarE tensor_scalar: ``N / scalar_engine_16bit_speedup`` for 16-bit float in and out, else
  ``N`` (S23, S11).
- GpSimd tensor_scalar (rsqrt only, see below): rsqrt has "4x lower throughput than Scalar Engine"
  (S16-shared): ``N * gpsimd_rsqrt_cost_factor``.
- scalar_tensor_tensor: ``N`` if data, operand1 and dst are bf16, op0 is subtract, op1 multiply and
  N is even, else ``2N``. (The table omits MIN_II here; it is applied anyway, as everywhere else:
  MIN_II is the floor of any instruction's initiation interval, §2.1.)

Decisions on the documented engine rules (S16 docstrings): tensor_scalar on GpSimd is "only allowed
for rsqrt" — op0 rsqrt, no op1; on ScalarE of trn2 (gen3) only mul+add, mul and add; bit operators
only on VectorE. "power and int32/uint32 default to GpSimd" is the compiler's default engine choice,
not a rule: VectorE runs them too. [P, 1] operand tiles are fp32 or data's dtype for arithmetic
(S16 asks for fp32) and an integer dtype for bit operators.

Kernels stream the tile through blocks of partitions (see ``alu.py``), or, on plain fp32 rows whose
destination is the same elements as each source or shares no byte with it, take one fused pass.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0
from neuronsim.sim.engines.alu import (
    MODE_BITVEC,
    MODE_FLOAT,
    alu_np,
    alu_step,
    apply_rows_f32,
    apply_rows_int,
    bit_op_np,
    combine_f32,
)
from neuronsim.sim.engines.common import (
    OpDef,
    alu_immediate,
    elementwise_cycles,
    fail,
    flag,
    require,
    require_free_limit,
    require_int_operands,
    require_known_immediates,
    require_not_both_psum,
    require_operands,
    require_same_shape,
    scalar_speedup,
    vector_perf_speedup,
)
from neuronsim.sim.ir import BITVEC_ALU_OPS, UNARY_ALU_OPS, AccessPattern, AluOp, Engine, Instruction, Opcode
from neuronsim.sim.memory.access import (
    AP_WIDTH,
    F_DTYPE,
    ap_free,
    ap_parts,
    block_rows,
    f32_row,
    f32_rows,
    load_rows_f32,
    load_rows_i64,
    row_address,
    row_offsets,
    same_start_or_disjoint,
    store_rows_f32,
    store_rows_i64,
    u32_row,
    u32_rows,
)
from neuronsim.sim.memory.numerics import canonical_f32_bits, load_f32, load_i64
from neuronsim.sim.memory.reference import RefMemory

SCALAR_ENGINE_GEN3_OPS = frozenset({(AluOp.multiply, AluOp.add), (AluOp.multiply, None), (AluOp.add, None)})
_NO_OP = -1  # op1 absent
_NO_SLOT = -1  # operand given as an immediate
_ADD, _SUB, _MUL, _DIV = int(AluOp.add), int(AluOp.subtract), int(AluOp.multiply), int(AluOp.divide)


# ---------------------------------------------------------------- scalar operands

def _require_float(ins: Instruction, name: str, default=None) -> float:
    value = ins.imm.get(name, default)
    require(isinstance(value, numbers.Real) and not isinstance(value, bool), ins,
            f"{name}={value!r} must be a number (or a [P, 1] tile with {name}_is_tile=True)")
    return float(value)


def _require_tile(ins: Instruction, tile: AccessPattern, data: AccessPattern, role: str,
                  bitvec: bool) -> None:
    require(tile.partitions == data.partitions and tile.free_size == 1, ins,
            f"{role} tile is {tile.partitions}x{tile.free_size} (partitions x free); it must be "
            f"[{data.partitions}, 1]")
    if bitvec:
        if not tile.dtype.is_int:
            raise fail(ins, f"{role} tile is {tile.dtype.name}; bit operators need an integer tile",
                       DtypeError)
    elif tile.dtype not in (DType.float32, data.dtype):
        raise fail(ins, f"{role} tile is {tile.dtype.name}; it must be float32 or the data's dtype "
                   f"{data.dtype.name}", DtypeError)


def _require_operand(ins: Instruction, op: AluOp, name: str, is_tile: bool, bitvec: bool) -> None:
    """An immediate operand is a number (a whole one for bit operators); unary operators need none."""
    if is_tile:
        return
    if name not in ins.imm and op in UNARY_ALU_OPS:
        return
    value = _require_float(ins, name)
    if bitvec:
        require(math.isfinite(value) and value == int(value) and abs(value) <= 2**53, ins,
                f"{name}={ins.imm[name]!r}: a bit operator's immediate must be a whole number of at most "
                "2**53 in magnitude (immediates travel as float64)")


def _ops_kind(ins: Instruction, *ops: AluOp | None) -> bool:
    """True for bit operators; raises when an instruction mixes bit and arithmetic operators."""
    kinds = {op in BITVEC_ALU_OPS for op in ops if op is not None and op is not AluOp.bypass}
    names = ", ".join(o.name for o in ops if o is not None)
    require(len(kinds) <= 1, ins, f"mixes bit and arithmetic operators ({names}); both must be bitvec or "
            "both arithmetic (S16)")
    return kinds == {True}


def _ref_operand(ins: Instruction, mem: RefMemory, tile: AccessPattern | None, name: str, shape,
                 bitvec: bool):
    """A scalar operand broadcast to ``shape``: a [P, 1] tile's values or the immediate."""
    if tile is not None:
        values = mem.read_int(tile) if bitvec else mem.read(tile)
    elif bitvec:
        values = np.int64(ins.imm.get(name, 0))
    else:
        with np.errstate(over="ignore"):  # a float64 immediate beyond fp32 rounds to inf
            values = np.float32(ins.imm.get(name, 0.0))
    return np.broadcast_to(values, shape)


def _slot(k: int) -> int:
    return SRC0 + AP_WIDTH * k


@njit(cache=True)
def _scalars_f32(row, bases, slot, imm, p0, out):
    """Per-partition operands for partitions p0 ..: a [P, 1] tile's values, or the immediate."""
    if slot == _NO_SLOT:
        out[:] = np.float32(imm)
    else:
        code = row[slot + F_DTYPE]
        for b in range(out.size):
            out[b] = load_f32(row_address(row, slot, bases, p0 + b), code)


@njit(cache=True)
def _scalars_i64(row, bases, slot, imm, p0, out):
    if slot == _NO_SLOT:
        out[:] = np.int64(imm)
    else:
        code = row[slot + F_DTYPE]
        for b in range(out.size):
            out[b] = load_i64(row_address(row, slot, bases, p0 + b), code)


# ---------------------------------------------------------------- tensor_scalar

_TS_IMMEDIATES = frozenset({"op0", "operand0", "reverse0", "op1", "operand1", "reverse1",
                            "operand0_is_tile", "operand1_is_tile"})


def _ts_tiles(ins: Instruction) -> tuple[AccessPattern | None, AccessPattern | None]:
    k = 1
    tiles = []
    for name in ("operand0_is_tile", "operand1_is_tile"):
        if flag(ins, name):
            tiles.append(ins.srcs[k])
            k += 1
        else:
            tiles.append(None)
    return tiles[0], tiles[1]


def _check_tensor_scalar(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _TS_IMMEDIATES)
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1", optional=True)
    require(op1 is not None or not flag(ins, "operand1_is_tile"), ins,
            "operand1_is_tile=True but op1 is None (op1 and operand1 go together)")
    require_operands(ins, 1 + flag(ins, "operand0_is_tile") + flag(ins, "operand1_is_tile"))
    data, dst = ins.srcs[0], ins.dst
    require_same_shape(ins, dst, data, "dst", "data")
    bitvec = _ops_kind(ins, op0, op1)
    tile0, tile1 = _ts_tiles(ins)
    for tile, role in ((tile0, "operand0"), (tile1, "operand1")):
        if tile is not None:
            _require_tile(ins, tile, data, role, bitvec)
    _require_operand(ins, op0, "operand0", tile0 is not None, bitvec)
    if op1 is not None:
        _require_operand(ins, op1, "operand1", tile1 is not None, bitvec)
    if bitvec:
        require(ins.engine is Engine.VECTOR, ins, "bit operators run on the vector engine only (S16)")
        require_int_operands(ins, [(data, "data"), (dst, "dst")], "bit operators")
    single = None if op1 in (None, AluOp.bypass) else op1
    if ins.engine is Engine.SCALAR and chip.nki_target == "gen3":
        allowed = ", ".join(f"{a.name}+{b.name}" if b else a.name for a, b in sorted(
            SCALAR_ENGINE_GEN3_OPS, key=str))
        require((op0, single) in SCALAR_ENGINE_GEN3_OPS, ins,
                f"ops {op0.name}, {op1.name if op1 else None}: on {chip.name} (gen3) the scalar engine runs "
                f"tensor_scalar only as {allowed} (S16)")
    if ins.engine is Engine.GPSIMD:
        require(op0 is AluOp.rsqrt and single is None, ins,
                f"ops {op0.name}, {op1.name if op1 else None}: tensor_scalar on gpsimd is only allowed for "
                "rsqrt (op0=rsqrt, no op1; S16)")
    require_free_limit(ins, chip)


def _cycles_tensor_scalar(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE ``N / perf-mode speedup`` (S23, S10), ``N * vector_reciprocal_cost_factor`` with a
    reciprocal (S16-shared); ScalarE ``N / scalar_engine_16bit_speedup`` for 16-bit in+out (S23,
    S11); GpSimd (rsqrt) ``N * gpsimd_rsqrt_cost_factor`` (S16-shared). Stride penalty, max(MIN_II, .)."""
    data, dst = ins.srcs[0], ins.dst
    n = data.free_size
    if ins.engine is Engine.SCALAR:
        return elementwise_cycles(ins, chip, n, scalar_speedup(data, dst, chip))
    if ins.engine is Engine.GPSIMD:
        return elementwise_cycles(ins, chip, n * chip.gpsimd_rsqrt_cost_factor)
    if AluOp.reciprocal in (alu_immediate(ins, "op0"), alu_immediate(ins, "op1", optional=True)):
        return elementwise_cycles(ins, chip, n * chip.vector_reciprocal_cost_factor)
    return elementwise_cycles(ins, chip, n, vector_perf_speedup(data, dst, chip))


def _ref_tensor_scalar(ins: Instruction, mem: RefMemory) -> None:
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1", optional=True)
    data = ins.srcs[0]
    tile0, tile1 = _ts_tiles(ins)
    bitvec = _ops_kind(ins, op0, op1)
    x = mem.read_int(data) if bitvec else mem.read(data)
    steps = [(op0, tile0, "operand0", flag(ins, "reverse0"))]
    if op1 is not None:
        steps.append((op1, tile1, "operand1", flag(ins, "reverse1")))
    for op, tile, name, reverse in steps:
        s = _ref_operand(ins, mem, tile, name, x.shape, bitvec)
        a, b = (s, x) if reverse else (x, s)
        x = bit_op_np(op, a, b, ins.dst.dtype) if bitvec else alu_np(op, a, b)
    if bitvec:
        mem.write_int(ins.dst, x)
    else:
        mem.write(ins.dst, x)


def _encode_tensor_scalar(ins: Instruction) -> tuple[list[int], list[float]]:
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1", optional=True)
    tile0 = flag(ins, "operand0_is_tile")
    slot0 = _slot(1) if tile0 else _NO_SLOT
    slot1 = _slot(1 + tile0) if flag(ins, "operand1_is_tile") else _NO_SLOT
    ints = [int(op0), _NO_OP if op1 is None else int(op1), flag(ins, "reverse0"), flag(ins, "reverse1"),
            slot0, slot1, MODE_BITVEC if _ops_kind(ins, op0, op1) else MODE_FLOAT]
    floats = [float(ins.imm.get("operand0", 0.0) if slot0 == _NO_SLOT else 0.0),
              float(ins.imm.get("operand1", 0.0) if slot1 == _NO_SLOT else 0.0)]
    return ints, floats


# Fused fp32 paths: when every operand is plain fp32 with contiguous rows (access.f32_rows) and the
# destination is either disjoint from each source or the very same elements, read, compute and
# write in one pass. NaN inputs are not canonicalized here: whether a result is NaN never depends
# on a NaN's payload, and the store canonicalizes every NaN result, so the bits are the same.

@njit(cache=True)
def _fused_ts_f32(a, o, op0, s0, rev0, op1, s1, rev1):
    parts, n = a.shape
    for p in range(parts):
        x, d = f32_row(a, p), u32_row(o, p)
        sp, tp = s0[p], s1[p]
        if op1 == _NO_OP:
            if op0 == _MUL:
                for j in range(n):
                    d[j] = canonical_f32_bits(x[j] * sp)
            elif op0 == _ADD:
                for j in range(n):
                    d[j] = canonical_f32_bits(x[j] + sp)
            elif op0 == _DIV and not rev0:
                for j in range(n):
                    d[j] = canonical_f32_bits(np.true_divide(x[j], sp))
            else:
                for j in range(n):
                    d[j] = canonical_f32_bits(alu_step(op0, x[j], sp, rev0))
        elif op0 == _MUL and op1 == _ADD and not rev0 and not rev1:  # scale and bias, the common pair
            for j in range(n):
                d[j] = canonical_f32_bits(x[j] * sp + tp)
        elif op0 == _ADD and op1 == _MUL and not rev0 and not rev1:
            for j in range(n):
                d[j] = canonical_f32_bits((x[j] + sp) * tp)
        elif op0 == _SUB and op1 == _MUL and not rev0 and not rev1:  # centre and scale
            for j in range(n):
                d[j] = canonical_f32_bits((x[j] - sp) * tp)
        else:
            for j in range(n):
                d[j] = canonical_f32_bits(alu_step(op1, alu_step(op0, x[j], sp, rev0), tp, rev1))


@njit(cache=True)
def _nb_tensor_scalar(row, frow, bases):
    op0, op1, rev0, rev1 = row[IMM], row[IMM + 1], row[IMM + 2] != 0, row[IMM + 3] != 0
    slot0, slot1, mode = row[IMM + 4], row[IMM + 5], row[IMM + 6]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, offd = row_offsets(row, SRC0), row_offsets(row, DST)
    block = block_rows(parts, n)
    if mode == MODE_FLOAT:
        a, o = f32_rows(row, SRC0, bases, offs), u32_rows(row, DST, bases, offd)
        if a.size and o.size and same_start_or_disjoint(row, SRC0, DST, bases):
            s0, s1 = np.empty(parts, dtype=np.float32), np.empty(parts, dtype=np.float32)
            _scalars_f32(row, bases, slot0, frow[0], 0, s0)
            if op1 != _NO_OP:
                _scalars_f32(row, bases, slot1, frow[1], 0, s1)
            _fused_ts_f32(a, o, op0, s0, rev0, op1, s1, rev1)
            return
        xb = np.empty(block * n, dtype=np.float32)
        s0b = np.empty(block, dtype=np.float32)
        s1b = np.empty(block, dtype=np.float32)
        for p0 in range(0, parts, block):
            k = min(block, parts - p0)
            x, s0, s1 = xb[:k * n], s0b[:k], s1b[:k]
            load_rows_f32(row, SRC0, bases, p0, offs, x)
            _scalars_f32(row, bases, slot0, frow[0], p0, s0)
            apply_rows_f32(op0, x, s0, n, rev0)
            if op1 != _NO_OP:
                _scalars_f32(row, bases, slot1, frow[1], p0, s1)
                apply_rows_f32(op1, x, s1, n, rev1)
            store_rows_f32(row, DST, bases, p0, offd, x)
        return
    code = row[DST + F_DTYPE]
    xib = np.empty(block * n, dtype=np.int64)
    s0ib = np.empty(block, dtype=np.int64)
    s1ib = np.empty(block, dtype=np.int64)
    for p0 in range(0, parts, block):
        k = min(block, parts - p0)
        xi, s0i, s1i = xib[:k * n], s0ib[:k], s1ib[:k]
        load_rows_i64(row, SRC0, bases, p0, offs, xi)
        _scalars_i64(row, bases, slot0, frow[0], p0, s0i)
        apply_rows_int(op0, xi, s0i, n, rev0, code)
        if op1 != _NO_OP:
            _scalars_i64(row, bases, slot1, frow[1], p0, s1i)
            apply_rows_int(op1, xi, s1i, n, rev1, code)
        store_rows_i64(row, DST, bases, p0, offd, xi)


# ---------------------------------------------------------------- scalar_tensor_tensor

_STT_IMMEDIATES = frozenset({"op0", "operand0", "operand0_is_tile", "op1", "reverse0", "reverse1"})


def _stt_operands(ins: Instruction) -> tuple[AccessPattern | None, AccessPattern]:
    """(operand0 tile or None, operand1 tensor)."""
    if flag(ins, "operand0_is_tile"):
        return ins.srcs[1], ins.srcs[2]
    return None, ins.srcs[1]


def _check_scalar_tensor_tensor(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, _STT_IMMEDIATES)
    require_operands(ins, 2 + flag(ins, "operand0_is_tile"))
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1")
    for op, name in ((op0, "op0"), (op1, "op1")):
        require(op not in BITVEC_ALU_OPS, ins, f"{name}={op.name}: scalar_tensor_tensor takes arithmetic "
                "operators only; bitvec operators are not supported (S16)")
    require(op1 not in UNARY_ALU_OPS, ins, f"op1={op1.name} is unary; op1 combines with the operand1 tensor")
    data = ins.srcs[0]
    tile0, operand1 = _stt_operands(ins)
    require_same_shape(ins, operand1, data, "operand1", "data")
    require_same_shape(ins, ins.dst, data, "dst", "data")
    require_not_both_psum(ins, data, operand1, "data and operand1")
    if tile0 is not None:
        _require_tile(ins, tile0, data, "operand0", bitvec=False)
    _require_operand(ins, op0, "operand0", tile0 is not None, bitvec=False)
    require_free_limit(ins, chip)


def _cycles_scalar_tensor_tensor(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``N`` if data, operand1 and dst are bf16, op0 subtract, op1 multiply and N even, else
    ``2N``; stride penalty; ``max(MIN_II, .)`` (see the module docstring)."""
    data = ins.srcs[0]
    _, operand1 = _stt_operands(ins)
    n = data.free_size
    fast = (all(ap.dtype is DType.bfloat16 for ap in (data, operand1, ins.dst))
            and alu_immediate(ins, "op0") is AluOp.subtract and alu_immediate(ins, "op1") is AluOp.multiply
            and n % 2 == 0)
    return elementwise_cycles(ins, chip, n if fast else 2 * n)


def _ref_scalar_tensor_tensor(ins: Instruction, mem: RefMemory) -> None:
    op0, op1 = alu_immediate(ins, "op0"), alu_immediate(ins, "op1")
    tile0, operand1 = _stt_operands(ins)
    x = mem.read(ins.srcs[0])
    s = _ref_operand(ins, mem, tile0, "operand0", x.shape, bitvec=False)
    x = alu_np(op0, s, x) if flag(ins, "reverse0") else alu_np(op0, x, s)
    y = mem.read(operand1)
    x = alu_np(op1, y, x) if flag(ins, "reverse1") else alu_np(op1, x, y)
    mem.write(ins.dst, x)


def _encode_scalar_tensor_tensor(ins: Instruction) -> tuple[list[int], list[float]]:
    tile0 = flag(ins, "operand0_is_tile")
    ints = [int(alu_immediate(ins, "op0")), int(alu_immediate(ins, "op1")), flag(ins, "reverse0"),
            flag(ins, "reverse1"), _slot(1) if tile0 else _NO_SLOT, _slot(1 + tile0)]
    return ints, [0.0 if tile0 else float(ins.imm.get("operand0", 0.0))]


@njit(cache=True)
def _fused_stt_f32(a, b, o, op0, s0, rev0, op1, rev1):
    """scalar_tensor_tensor in one pass: ``(a op0 s0[p]) op1 b``, each step rounded to fp32."""
    parts, n = a.shape
    for p in range(parts):
        x, y, d = f32_row(a, p), f32_row(b, p), u32_row(o, p)
        sp = s0[p]
        if op0 == _MUL and op1 == _ADD and not rev0:
            for j in range(n):
                d[j] = canonical_f32_bits(x[j] * sp + y[j])
        elif op0 == _MUL and op1 == _MUL and not rev0:
            for j in range(n):
                d[j] = canonical_f32_bits((x[j] * sp) * y[j])
        elif op0 == _SUB and op1 == _MUL and not rev0:
            for j in range(n):
                d[j] = canonical_f32_bits((x[j] - sp) * y[j])
        elif op0 == _MUL and op1 == _DIV and not rev0 and not rev1:  # addcdiv's (value * t1) / t2
            for j in range(n):
                d[j] = canonical_f32_bits(np.true_divide(x[j] * sp, y[j]))
        else:
            for j in range(n):
                d[j] = canonical_f32_bits(alu_step(op1, alu_step(op0, x[j], sp, rev0), y[j], rev1))


@njit(cache=True)
def _nb_scalar_tensor_tensor(row, frow, bases):
    op0, op1, rev0, rev1 = row[IMM], row[IMM + 1], row[IMM + 2] != 0, row[IMM + 3] != 0
    slot0, slot1 = row[IMM + 4], row[IMM + 5]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, off1, offd = row_offsets(row, SRC0), row_offsets(row, slot1), row_offsets(row, DST)
    a, b = f32_rows(row, SRC0, bases, offs), f32_rows(row, slot1, bases, off1)
    o = u32_rows(row, DST, bases, offd)
    if (a.size and b.size and o.size and same_start_or_disjoint(row, SRC0, DST, bases)
            and same_start_or_disjoint(row, slot1, DST, bases)):
        s0 = np.empty(parts, dtype=np.float32)
        _scalars_f32(row, bases, slot0, frow[0], 0, s0)
        _fused_stt_f32(a, b, o, op0, s0, rev0, op1, rev1)
        return
    block = block_rows(parts, n)
    xb = np.empty(block * n, dtype=np.float32)
    yb = np.empty(block * n, dtype=np.float32)
    s0b = np.empty(block, dtype=np.float32)
    for p0 in range(0, parts, block):
        k = min(block, parts - p0)
        x, y, s0 = xb[:k * n], yb[:k * n], s0b[:k]
        load_rows_f32(row, SRC0, bases, p0, offs, x)
        load_rows_f32(row, slot1, bases, p0, off1, y)
        _scalars_f32(row, bases, slot0, frow[0], p0, s0)
        apply_rows_f32(op0, x, s0, n, rev0)
        combine_f32(op1, x, y, rev1)
        store_rows_f32(row, DST, bases, p0, offd, x)


OPS = [
    OpDef(Opcode.TENSOR_SCALAR, _check_tensor_scalar, _cycles_tensor_scalar, _ref_tensor_scalar,
          _encode_tensor_scalar, _nb_tensor_scalar),
    OpDef(Opcode.SCALAR_TENSOR_TENSOR, _check_scalar_tensor_tensor, _cycles_scalar_tensor_tensor,
          _ref_scalar_tensor_tensor, _encode_scalar_tensor_tensor, _nb_scalar_tensor_tensor),
]
