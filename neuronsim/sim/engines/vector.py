"""VectorE elementwise instructions: tensor_tensor, tensor_scalar, scalar_tensor_tensor, tensor_copy,
memset, tensor_copy_predicated and select — checks, semantics (numpy reference and Numba) and costs
side by side. tensor_tensor also runs on GpSimd; tensor_scalar and tensor_copy on ScalarE and GpSimd;
memset on GpSimd (``ir.OPCODE_ENGINES``).

Numerics, identical in both executors:

- Arithmetic operators: every source is read as fp32, each ALU operator is one fp32 operation
  rounded once (``alu_f32`` / ``alu_np``), and the result rounds to the destination dtype once, on
  the write. Float immediates are rounded to fp32 first. ``reverse`` flags swap an operator's
  inputs (``operand op data``), literally, unary operators included.
- Bit operators (``BITVEC_ALU_OPS``) need integer dtypes on every operand and work on the integer
  values (S16: "treated as bit patterns"); each operator's result wraps to the destination's width
  (``alu_int``). Integer immediates must be whole numbers. An instruction never mixes the two kinds.
- tensor_tensor on GpSimd with every tile int32/uint32 uses native integer arithmetic (S16:
  "exact results for all 32-bit integer values") for add, subtract, multiply, max, min, abs_max,
  abs_min, comparisons and logical operators, wrapping to the destination's width; other operators
  (divide, power, mod) keep the fp32 path.
- tensor_copy is bit-exact when src and dst dtypes match, else src -> fp32 -> dst (S16, S10: on v3+
  ScalarE too). tensor_copy_predicated copies bits (src and dst share a dtype, S16) where
  ``(predicate != 0) xor reverse_pred`` and leaves the other dst bits untouched. select writes
  ``on_true`` where ``predicate != 0`` else ``on_false``, bit-exact when all three share a dtype,
  through fp32 otherwise. memset writes an integer value exactly into an integer dtype (saturating),
  any other value as fp32 rounded to the dtype.

Costs, in cycles of the issuing engine (S23 table in trainium-hardware.md §2.8, v3 perf modes §2.3,
S9 stride rule §1.4; every number from the ChipSpec). N = elements per partition, MIN_II =
``min_ii_cycles``; ``max(MIN_II, ...)`` is applied last, to every formula.

- VectorE tensor_scalar / tensor_copy: ``N``; perf mode (16-bit float data and dst) divides N by
  ``vector_perf_mode_sbuf_16bit_speedup`` when both are in SBUF with a contiguous innermost dim, else
  by ``vector_perf_mode_other_16bit_speedup``. A reciprocal operator costs ``N *
  vector_reciprocal_cost_factor`` (S16-shared, 8N) with no perf mode.
- VectorE tensor_tensor: ``N`` if one input is in PSUM and the other in SBUF, or everything is bf16,
  the op is add/subtract/multiply, all three are contiguous and both inputs are in SBUF; else ``2N``.
  Then ``/ vector_perf_mode_other_16bit_speedup`` when both inputs are in SBUF and all three tensors
  are 16-bit floats (the v3 mode comes on top of the legacy formula).
- scalar_tensor_tensor: ``N`` if data, operand1 and dst are bf16, op0 is subtract, op1 multiply and
  N is even, else ``2N``. (The table omits MIN_II here; it is applied anyway, as everywhere else:
  MIN_II is the floor of any instruction's initiation interval, §2.1.)
- tensor_copy_predicated: ``N`` if exactly one of src and predicate is in PSUM, else ``2N``.
- memset: ``N/2`` for a zero into bf16/fp16, else ``N``.
- select: ``2N`` (two data inputs, as tensor_tensor; not in the table).
- ScalarE tensor_scalar / tensor_copy: ``N / scalar_engine_16bit_speedup`` for 16-bit float in and
  out, else ``N`` (S23, S11).
- GpSimd: nothing is documented for these instructions except tensor_copy (``N``) and rsqrt, which
  has "4x lower throughput than Scalar Engine" (S16-shared): tensor_scalar (rsqrt only, see below)
  costs ``N * gpsimd_rsqrt_cost_factor``. tensor_copy and memset cost ``N``; tensor_tensor ``2N``,
  because each GpSimd core reads its 16 partitions through one 512-bit interface (S9): one fp32 per
  partition per cycle, so two inputs take two passes, as on VectorE.
- Stride penalty (S9): if any operand's innermost free stride exceeds
  ``access_stride_penalty_threshold_bytes`` (16 B), its interface delivers about half the bandwidth;
  the N term is multiplied by ``access_stride_penalty_factor`` (2).

Decisions on the documented engine rules (S16 docstrings): tensor_scalar on GpSimd is "only allowed
for rsqrt" — op0 rsqrt, no op1; on ScalarE of trn2 (gen3) only mul+add, mul and add; bit operators
only on VectorE. "power and int32/uint32 default to GpSimd" is the compiler's default engine choice,
not a rule: VectorE runs them too. [P, 1] operand tiles are fp32 or data's dtype for arithmetic
(S16 asks for fp32) and an integer dtype for bit operators.

Kernels stream a tile through cache-sized blocks of partitions (``access.block_rows``): read the
block of each input into an fp32 (or int64) buffer, compute in place with the operator
loop-invariant, write the block. Operand ranges of one partition count either coincide or are
disjoint (the start partition rule), so block order is invisible and the result equals the
reference's read-everything-then-write. tensor_tensor and tensor_scalar on plain fp32 rows take a
fused one-pass loop instead, when the destination is the same elements as each source or shares no
byte with it (see ``_fused_tt_f32``).
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
from neuronsim.sim.engines.alu import alu_f32, alu_int, alu_int_np, alu_np, wrap_int, wrap_int_np
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    max_ii,
    no_immediates,
    require,
    require_operands,
    require_same_shape,
)
from neuronsim.sim.ir import BITVEC_ALU_OPS, AccessPattern, AluOp, Engine, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import (
    AP_WIDTH,
    F_DTYPE,
    ITEMSIZE,
    RefMemory,
    ap_free,
    ap_parts,
    block_rows,
    copy_by_runs,
    disjoint,
    f32_row,
    f32_rows,
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
from neuronsim.sim.memory.numerics import (
    CANONICAL_NAN_BITS,
    canonical_f32_bits,
    load_f32,
    load_i64,
    load_u8,
    load_u16,
    load_u32,
)

UNARY_ALU_OPS = frozenset({AluOp.abs, AluOp.square, AluOp.relu, AluOp.rsqrt, AluOp.reciprocal, AluOp.invert})
# Operators GpSimd computes natively on int32/uint32 tiles (tensor_tensor, S16).
NATIVE_INT_ALU_OPS = frozenset({
    AluOp.bypass, AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.maximum, AluOp.minimum,
    AluOp.abs_max, AluOp.abs_min, AluOp.equal, AluOp.not_equal, AluOp.greater, AluOp.greater_equal,
    AluOp.less, AluOp.less_equal, AluOp.logical_and, AluOp.logical_or, AluOp.logical_xor,
})
NATIVE_INT_DTYPES = frozenset({DType.int32, DType.uint32})
PREDICATE_DTYPES = frozenset({DType.uint8, DType.uint16, DType.uint32, DType.bool_})  # S16
SCALAR_ENGINE_GEN3_OPS = frozenset({(AluOp.multiply, AluOp.add), (AluOp.multiply, None), (AluOp.add, None)})
TT_FAST_BF16_OPS = frozenset({AluOp.add, AluOp.subtract, AluOp.multiply})  # S23 tensor_tensor

# How an instruction computes (int immediate of the encoded row).
MODE_FLOAT, MODE_BITVEC, MODE_NATIVE_INT = 0, 1, 2
_NO_OP = -1  # op1 absent
_NO_SLOT = -1  # operand given as an immediate

_BYPASS = int(AluOp.bypass)
_ADD, _SUB, _MUL, _DIV = int(AluOp.add), int(AluOp.subtract), int(AluOp.multiply), int(AluOp.divide)
_MAX, _MIN, _AMAX, _AMIN = int(AluOp.maximum), int(AluOp.minimum), int(AluOp.abs_max), int(AluOp.abs_min)
_EQ, _NE, _GT, _GE, _LT, _LE = (int(AluOp.equal), int(AluOp.not_equal), int(AluOp.greater),
                                int(AluOp.greater_equal), int(AluOp.less), int(AluOp.less_equal))
_LAND, _LOR, _LXOR = int(AluOp.logical_and), int(AluOp.logical_or), int(AluOp.logical_xor)
_NAN32 = CANONICAL_NAN_BITS[DType.float32]


# ---------------------------------------------------------------- shared checks

def _alu(ins: Instruction, name: str, optional: bool = False) -> AluOp | None:
    """The ``AluOp`` immediate ``name`` (an AluOp, its value or its name); None if optional and absent."""
    raw = ins.imm.get(name)
    if raw is None:
        if optional:
            return None
        raise fail(ins, f"needs the immediate '{name}' (an ALU operator)")
    try:
        return AluOp[raw] if isinstance(raw, str) else AluOp(raw)
    except (KeyError, ValueError):
        raise fail(ins, f"immediate {name}={raw!r} is not an ALU operator") from None


def _flag(ins: Instruction, name: str) -> bool:
    return bool(ins.imm.get(name, False))


def _require_known_immediates(ins: Instruction, known: frozenset[str]) -> None:
    unknown = sorted(set(ins.imm) - known)
    require(not unknown, ins, f"has unknown immediate(s) {unknown}; {ins.opcode.name.lower()} takes "
            f"{sorted(known) if known else 'none'}")


def _require_float(ins: Instruction, name: str, default=None) -> float:
    value = ins.imm.get(name, default)
    require(isinstance(value, numbers.Real) and not isinstance(value, bool), ins,
            f"{name}={value!r} must be a number (or a [P, 1] tile with {name}_is_tile=True)")
    return float(value)


def _require_free_limit(ins: Instruction, chip: ChipSpec) -> None:
    """S9: up to ``vector_free_max_sbuf`` elements per partition, ``vector_free_max_psum`` when any
    operand is in PSUM (the common rule of the compute ops, S16)."""
    aps = [ap for ap, _ in ins.accesses()]
    psum = any(ap.memory is Memory.PSUM for ap in aps)
    limit, key = ((chip.vector_free_max_psum, "vector_free_max_psum") if psum else
                  (chip.vector_free_max_sbuf, "vector_free_max_sbuf"))
    free = max(ap.free_size for ap in aps)
    require(free <= limit, ins, f"has {free} elements per partition; the limit is {limit} ({key}"
            f"{', an operand is in PSUM' if psum else ''})")


def _require_not_both_psum(ins: Instruction, a: AccessPattern, b: AccessPattern, what: str) -> None:
    require(not (a.memory is Memory.PSUM and b.memory is Memory.PSUM), ins,
            f"{what} cannot both be in PSUM ({a.describe()}, {b.describe()})")


def _require_int(ins: Instruction, aps: list[tuple[AccessPattern, str]], why: str) -> None:
    for ap, role in aps:
        if not ap.dtype.is_int:
            raise fail(ins, f"{role} is {ap.dtype.name}; {why} need integer dtypes on every operand",
                       DtypeError)


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


# ---------------------------------------------------------------- shared costs

def _stride_factor(ins: Instruction, chip: ChipSpec) -> float:
    """S9: an innermost stride above the threshold halves an interface's bandwidth."""
    worst = max(ap.innermost_stride_bytes() for ap, _ in ins.accesses())
    if worst > chip.access_stride_penalty_threshold_bytes:
        return float(chip.access_stride_penalty_factor)
    return 1.0


def _cycles(ins: Instruction, chip: ChipSpec, n_term: float, speedup: float = 1.0) -> float:
    """``max(MIN_II, n_term / speedup * stride_factor)``."""
    return max_ii(n_term / speedup * _stride_factor(ins, chip), chip)


def _contiguous_innermost(ap: AccessPattern) -> bool:
    return ap.innermost_stride_bytes() == ap.dtype.itemsize


def _vector_perf_speedup(data: AccessPattern, dst: AccessPattern, chip: ChipSpec) -> float:
    """v3 perf mode for tensor_copy / tensor_scalar (S10): 16-bit float in and out, 4x when both are
    in SBUF with a contiguous innermost dim, 2x otherwise (non-contiguous, or PSUM)."""
    if not (data.dtype.is_16bit_float and dst.dtype.is_16bit_float):
        return 1.0
    in_sbuf = data.memory is Memory.SBUF and dst.memory is Memory.SBUF
    if in_sbuf and _contiguous_innermost(data) and _contiguous_innermost(dst):
        return float(chip.vector_perf_mode_sbuf_16bit_speedup)
    return float(chip.vector_perf_mode_other_16bit_speedup)


def _scalar_speedup(data: AccessPattern, dst: AccessPattern, chip: ChipSpec) -> float:
    sixteen_bit = data.dtype.is_16bit_float and dst.dtype.is_16bit_float
    return float(chip.scalar_engine_16bit_speedup) if sixteen_bit else 1.0


# ---------------------------------------------------------------- Numba compute loops (op loop-invariant)

@njit(cache=True)
def _combine_f32(op, x, y, reverse):
    """``x[j] = x[j] op y[j]`` (``y[j] op x[j]`` when reversed), fp32."""
    n = x.size
    if op == _ADD:
        for j in range(n):
            x[j] = x[j] + y[j]
    elif op == _MUL:
        for j in range(n):
            x[j] = x[j] * y[j]
    elif op == _SUB and not reverse:
        for j in range(n):
            x[j] = x[j] - y[j]
    elif reverse:
        for j in range(n):
            x[j] = alu_f32(op, y[j], x[j])
    else:
        for j in range(n):
            x[j] = alu_f32(op, x[j], y[j])


@njit(cache=True)
def _apply_rows_f32(op, x, s, n, reverse):
    """``x[b, j] = x[b, j] op s[b]`` (``s[b] op x[b, j]`` when reversed) over rows of ``n``, fp32."""
    if op == _ADD:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] + sb
    elif op == _MUL:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] * sb
    elif op == _SUB and not reverse:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = x[j] - sb
    elif reverse:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = alu_f32(op, sb, x[j])
    else:
        for b in range(s.size):
            sb = s[b]
            for j in range(b * n, (b + 1) * n):
                x[j] = alu_f32(op, x[j], sb)


@njit(cache=True, inline="always")
def _bit_op(op, a, b, code):
    return a if op == _BYPASS else alu_int(op, a, b, code)


@njit(cache=True)
def _combine_int(op, x, y, reverse, code):
    if reverse:
        for j in range(x.size):
            x[j] = _bit_op(op, y[j], x[j], code)
    else:
        for j in range(x.size):
            x[j] = _bit_op(op, x[j], y[j], code)


@njit(cache=True)
def _apply_rows_int(op, x, s, n, reverse, code):
    if reverse:
        for b in range(s.size):
            for j in range(b * n, (b + 1) * n):
                x[j] = _bit_op(op, s[b], x[j], code)
    else:
        for b in range(s.size):
            for j in range(b * n, (b + 1) * n):
                x[j] = _bit_op(op, x[j], s[b], code)


@njit(cache=True)
def native_int(op, a, b, code):
    """GpSimd's native integer ``a op b`` (NATIVE_INT_ALU_OPS), wrapped to the dtype ``code``."""
    if op == _ADD:
        r = a + b
    elif op == _SUB:
        r = a - b
    elif op == _MUL:
        r = a * b  # int64 wraparound keeps the low 32 bits exact
    elif op == _MAX:
        r = a if a >= b else b
    elif op == _MIN:
        r = a if a <= b else b
    elif op == _AMAX:
        r = max(abs(a), abs(b))
    elif op == _AMIN:
        r = min(abs(a), abs(b))
    elif op == _EQ:
        r = np.int64(a == b)
    elif op == _NE:
        r = np.int64(a != b)
    elif op == _GT:
        r = np.int64(a > b)
    elif op == _GE:
        r = np.int64(a >= b)
    elif op == _LT:
        r = np.int64(a < b)
    elif op == _LE:
        r = np.int64(a <= b)
    elif op == _LAND:
        r = np.int64(a != 0 and b != 0)
    elif op == _LOR:
        r = np.int64(a != 0 or b != 0)
    elif op == _LXOR:
        r = np.int64((a != 0) != (b != 0))
    else:  # bypass
        r = a
    return wrap_int(r, code)


@njit(cache=True)
def _combine_native_int(op, x, y, code):
    for j in range(x.size):
        x[j] = native_int(op, x[j], y[j], code)


def native_int_np(op: AluOp, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Reference of :func:`native_int` on int64 arrays."""
    op = AluOp(op)
    with np.errstate(over="ignore"):
        table = {
            AluOp.add: lambda: a + b,
            AluOp.subtract: lambda: a - b,
            AluOp.multiply: lambda: a * b,
            AluOp.maximum: lambda: np.maximum(a, b),
            AluOp.minimum: lambda: np.minimum(a, b),
            AluOp.abs_max: lambda: np.maximum(np.abs(a), np.abs(b)),
            AluOp.abs_min: lambda: np.minimum(np.abs(a), np.abs(b)),
            AluOp.equal: lambda: (a == b).astype(np.int64),
            AluOp.not_equal: lambda: (a != b).astype(np.int64),
            AluOp.greater: lambda: (a > b).astype(np.int64),
            AluOp.greater_equal: lambda: (a >= b).astype(np.int64),
            AluOp.less: lambda: (a < b).astype(np.int64),
            AluOp.less_equal: lambda: (a <= b).astype(np.int64),
            AluOp.logical_and: lambda: ((a != 0) & (b != 0)).astype(np.int64),
            AluOp.logical_or: lambda: ((a != 0) | (b != 0)).astype(np.int64),
            AluOp.logical_xor: lambda: ((a != 0) != (b != 0)).astype(np.int64),
            AluOp.bypass: lambda: a,
        }
        return wrap_int_np(np.asarray(table[op](), dtype=np.int64), dtype)


def _bit_op_np(op: AluOp, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    return np.asarray(a, dtype=np.int64) if op is AluOp.bypass else alu_int_np(op, a, b, dtype)


# Fused fp32 paths: when every operand is plain fp32 with contiguous rows (access.f32_rows) and the
# destination is either disjoint from each source or the very same elements, read, compute and
# write in one pass. NaN inputs are not canonicalized here: whether a result is NaN never depends
# on a NaN's payload, and the store canonicalizes every NaN result, so the bits are the same.

@njit(cache=True)
def _in_place_or_disjoint(row, bases, at):
    """The source ``at`` and DST are the same elements, or share no byte."""
    if row_address(row, at, bases, 0) == row_address(row, DST, bases, 0):
        return True
    return disjoint(row, at, DST, bases)


@njit(cache=True)
def _fused_tt_f32(op, a, b, o):
    parts, n = a.shape
    for p in range(parts):
        x, y, d = f32_row(a, p), f32_row(b, p), u32_row(o, p)
        if op == _ADD:
            for j in range(n):
                d[j] = canonical_f32_bits(x[j] + y[j])
        elif op == _SUB:
            for j in range(n):
                d[j] = canonical_f32_bits(x[j] - y[j])
        elif op == _MUL:
            for j in range(n):
                d[j] = canonical_f32_bits(x[j] * y[j])
        else:
            for j in range(n):
                d[j] = canonical_f32_bits(alu_f32(op, x[j], y[j]))


@njit(cache=True, inline="always")
def _alu_step(op, x, s, reverse):
    """``x op s`` (``s op x`` reversed) in fp32; the common ops without the ALU dispatch."""
    if op == _ADD:
        return x + s
    if op == _MUL:
        return x * s
    if op == _SUB and not reverse:
        return x - s
    if op == _DIV:  # IEEE division is alu's divide (x / +-0 = +-inf, 0 / 0 = NaN), with no
        return np.true_divide(s, x) if reverse else np.true_divide(x, s)  # ZeroDivisionError branch
    return alu_f32(op, s, x) if reverse else alu_f32(op, x, s)


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
                    d[j] = canonical_f32_bits(_alu_step(op0, x[j], sp, rev0))
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
                d[j] = canonical_f32_bits(_alu_step(op1, _alu_step(op0, x[j], sp, rev0), tp, rev1))


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
                d[j] = canonical_f32_bits(_alu_step(op1, _alu_step(op0, x[j], sp, rev0), y[j], rev1))


# ---------------------------------------------------------------- tensor_tensor

def _tt_mode(ins: Instruction) -> int:
    op = _alu(ins, "op")
    if op in BITVEC_ALU_OPS:
        return MODE_BITVEC
    tiles = (ins.dst, *ins.srcs)
    if (ins.engine is Engine.GPSIMD and op in NATIVE_INT_ALU_OPS
            and all(ap.dtype in NATIVE_INT_DTYPES for ap in tiles)):
        return MODE_NATIVE_INT
    return MODE_FLOAT


def _check_tensor_tensor(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 2)
    _require_known_immediates(ins, frozenset({"op"}))
    op = _alu(ins, "op")
    require(op not in UNARY_ALU_OPS, ins, f"op={op.name} is unary; tensor_tensor takes a binary operator")
    data1, data2 = ins.srcs
    require_same_shape(ins, data1, data2, "data1", "data2")
    require_same_shape(ins, ins.dst, data1, "dst", "data1")
    _require_not_both_psum(ins, data1, data2, "data1 and data2")
    if op in BITVEC_ALU_OPS:
        _require_int(ins, [(data1, "data1"), (data2, "data2"), (ins.dst, "dst")], "bit operators")
    _require_free_limit(ins, chip)


def _cycles_tensor_tensor(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE (S23 + S10): ``N`` if one input in PSUM and one in SBUF, or all bf16 + add/sub/mul +
    contiguous + both in SBUF; else ``2N``; ``/ vector_perf_mode_other_16bit_speedup`` with both
    inputs in SBUF and all tensors 16-bit. GpSimd: ``2N``. Then the stride penalty, ``max(MIN_II, .)``."""
    data1, data2 = ins.srcs
    n = data1.free_size
    if ins.engine is Engine.GPSIMD:
        return _cycles(ins, chip, 2 * n)
    tiles = (data1, data2, ins.dst)
    both_sbuf = data1.memory is Memory.SBUF and data2.memory is Memory.SBUF
    mixed = {data1.memory, data2.memory} == {Memory.SBUF, Memory.PSUM}
    fast_bf16 = (both_sbuf and _alu(ins, "op") in TT_FAST_BF16_OPS
                 and all(ap.dtype is DType.bfloat16 and ap.is_contiguous_free() for ap in tiles))
    n_term = n if (mixed or fast_bf16) else 2 * n
    speedup = 1.0
    if both_sbuf and all(ap.dtype.is_16bit_float for ap in tiles):
        speedup = float(chip.vector_perf_mode_other_16bit_speedup)
    return _cycles(ins, chip, n_term, speedup)


def _ref_tensor_tensor(ins: Instruction, mem: RefMemory) -> None:
    op = _alu(ins, "op")
    data1, data2 = ins.srcs
    mode = _tt_mode(ins)
    if mode == MODE_FLOAT:
        mem.write(ins.dst, alu_np(op, mem.read(data1), mem.read(data2)))
    elif mode == MODE_BITVEC:
        mem.write_int(ins.dst, _bit_op_np(op, mem.read_int(data1), mem.read_int(data2), ins.dst.dtype))
    else:
        mem.write_int(ins.dst, native_int_np(op, mem.read_int(data1), mem.read_int(data2), ins.dst.dtype))


def _encode_tensor_tensor(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(_alu(ins, "op")), _tt_mode(ins)], []


@njit(cache=True)
def _nb_tensor_tensor(row, frow, bases):
    op, mode = row[IMM], row[IMM + 1]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    off1, off2, offd = row_offsets(row, SRC0), row_offsets(row, SRC1), row_offsets(row, DST)
    block = block_rows(parts, n)
    if mode == MODE_FLOAT:
        a, b = f32_rows(row, SRC0, bases, off1), f32_rows(row, SRC1, bases, off2)
        o = u32_rows(row, DST, bases, offd)
        if (a.size and b.size and o.size and _in_place_or_disjoint(row, bases, SRC0)
                and _in_place_or_disjoint(row, bases, SRC1)):
            _fused_tt_f32(op, a, b, o)
            return
        xb = np.empty(block * n, dtype=np.float32)
        yb = np.empty(block * n, dtype=np.float32)
        for p0 in range(0, parts, block):
            m = min(block, parts - p0) * n
            x, y = xb[:m], yb[:m]
            load_rows_f32(row, SRC0, bases, p0, off1, x)
            load_rows_f32(row, SRC1, bases, p0, off2, y)
            _combine_f32(op, x, y, False)
            store_rows_f32(row, DST, bases, p0, offd, x)
        return
    code = row[DST + F_DTYPE]
    xib = np.empty(block * n, dtype=np.int64)
    yib = np.empty(block * n, dtype=np.int64)
    for p0 in range(0, parts, block):
        m = min(block, parts - p0) * n
        xi, yi = xib[:m], yib[:m]
        load_rows_i64(row, SRC0, bases, p0, off1, xi)
        load_rows_i64(row, SRC1, bases, p0, off2, yi)
        if mode == MODE_BITVEC:
            _combine_int(op, xi, yi, False, code)
        else:
            _combine_native_int(op, xi, yi, code)
        store_rows_i64(row, DST, bases, p0, offd, xi)


# ---------------------------------------------------------------- tensor_scalar

_TS_IMMEDIATES = frozenset({"op0", "operand0", "reverse0", "op1", "operand1", "reverse1",
                            "operand0_is_tile", "operand1_is_tile"})


def _ts_tiles(ins: Instruction) -> tuple[AccessPattern | None, AccessPattern | None]:
    k = 1
    tiles = []
    for name in ("operand0_is_tile", "operand1_is_tile"):
        if _flag(ins, name):
            tiles.append(ins.srcs[k])
            k += 1
        else:
            tiles.append(None)
    return tiles[0], tiles[1]


def _check_tensor_scalar(ins: Instruction, chip: ChipSpec) -> None:
    _require_known_immediates(ins, _TS_IMMEDIATES)
    op0, op1 = _alu(ins, "op0"), _alu(ins, "op1", optional=True)
    require(op1 is not None or not _flag(ins, "operand1_is_tile"), ins,
            "operand1_is_tile=True but op1 is None (op1 and operand1 go together)")
    require_operands(ins, 1 + _flag(ins, "operand0_is_tile") + _flag(ins, "operand1_is_tile"))
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
        _require_int(ins, [(data, "data"), (dst, "dst")], "bit operators")
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
    _require_free_limit(ins, chip)


def _cycles_tensor_scalar(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE ``N / perf-mode speedup`` (S23, S10), ``N * vector_reciprocal_cost_factor`` with a
    reciprocal (S16-shared); ScalarE ``N / scalar_engine_16bit_speedup`` for 16-bit in+out (S23,
    S11); GpSimd (rsqrt) ``N * gpsimd_rsqrt_cost_factor`` (S16-shared). Stride penalty, max(MIN_II, .)."""
    data, dst = ins.srcs[0], ins.dst
    n = data.free_size
    if ins.engine is Engine.SCALAR:
        return _cycles(ins, chip, n, _scalar_speedup(data, dst, chip))
    if ins.engine is Engine.GPSIMD:
        return _cycles(ins, chip, n * chip.gpsimd_rsqrt_cost_factor)
    if AluOp.reciprocal in (_alu(ins, "op0"), _alu(ins, "op1", optional=True)):
        return _cycles(ins, chip, n * chip.vector_reciprocal_cost_factor)
    return _cycles(ins, chip, n, _vector_perf_speedup(data, dst, chip))


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


def _ref_tensor_scalar(ins: Instruction, mem: RefMemory) -> None:
    op0, op1 = _alu(ins, "op0"), _alu(ins, "op1", optional=True)
    data = ins.srcs[0]
    tile0, tile1 = _ts_tiles(ins)
    bitvec = _ops_kind(ins, op0, op1)
    x = mem.read_int(data) if bitvec else mem.read(data)
    steps = [(op0, tile0, "operand0", _flag(ins, "reverse0"))]
    if op1 is not None:
        steps.append((op1, tile1, "operand1", _flag(ins, "reverse1")))
    for op, tile, name, reverse in steps:
        s = _ref_operand(ins, mem, tile, name, x.shape, bitvec)
        a, b = (s, x) if reverse else (x, s)
        x = _bit_op_np(op, a, b, ins.dst.dtype) if bitvec else alu_np(op, a, b)
    if bitvec:
        mem.write_int(ins.dst, x)
    else:
        mem.write(ins.dst, x)


def _slot(k: int) -> int:
    return SRC0 + AP_WIDTH * k


def _encode_tensor_scalar(ins: Instruction) -> tuple[list[int], list[float]]:
    op0, op1 = _alu(ins, "op0"), _alu(ins, "op1", optional=True)
    tile0 = _flag(ins, "operand0_is_tile")
    slot0 = _slot(1) if tile0 else _NO_SLOT
    slot1 = _slot(1 + tile0) if _flag(ins, "operand1_is_tile") else _NO_SLOT
    ints = [int(op0), _NO_OP if op1 is None else int(op1), _flag(ins, "reverse0"), _flag(ins, "reverse1"),
            slot0, slot1, MODE_BITVEC if _ops_kind(ins, op0, op1) else MODE_FLOAT]
    floats = [float(ins.imm.get("operand0", 0.0) if slot0 == _NO_SLOT else 0.0),
              float(ins.imm.get("operand1", 0.0) if slot1 == _NO_SLOT else 0.0)]
    return ints, floats


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


@njit(cache=True)
def _nb_tensor_scalar(row, frow, bases):
    op0, op1, rev0, rev1 = row[IMM], row[IMM + 1], row[IMM + 2] != 0, row[IMM + 3] != 0
    slot0, slot1, mode = row[IMM + 4], row[IMM + 5], row[IMM + 6]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, offd = row_offsets(row, SRC0), row_offsets(row, DST)
    block = block_rows(parts, n)
    if mode == MODE_FLOAT:
        a, o = f32_rows(row, SRC0, bases, offs), u32_rows(row, DST, bases, offd)
        if a.size and o.size and _in_place_or_disjoint(row, bases, SRC0):
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
            _apply_rows_f32(op0, x, s0, n, rev0)
            if op1 != _NO_OP:
                _scalars_f32(row, bases, slot1, frow[1], p0, s1)
                _apply_rows_f32(op1, x, s1, n, rev1)
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
        _apply_rows_int(op0, xi, s0i, n, rev0, code)
        if op1 != _NO_OP:
            _scalars_i64(row, bases, slot1, frow[1], p0, s1i)
            _apply_rows_int(op1, xi, s1i, n, rev1, code)
        store_rows_i64(row, DST, bases, p0, offd, xi)


# ---------------------------------------------------------------- scalar_tensor_tensor

_STT_IMMEDIATES = frozenset({"op0", "operand0", "operand0_is_tile", "op1", "reverse0", "reverse1"})


def _stt_operands(ins: Instruction) -> tuple[AccessPattern | None, AccessPattern]:
    """(operand0 tile or None, operand1 tensor)."""
    if _flag(ins, "operand0_is_tile"):
        return ins.srcs[1], ins.srcs[2]
    return None, ins.srcs[1]


def _check_scalar_tensor_tensor(ins: Instruction, chip: ChipSpec) -> None:
    _require_known_immediates(ins, _STT_IMMEDIATES)
    require_operands(ins, 2 + _flag(ins, "operand0_is_tile"))
    op0, op1 = _alu(ins, "op0"), _alu(ins, "op1")
    for op, name in ((op0, "op0"), (op1, "op1")):
        require(op not in BITVEC_ALU_OPS, ins, f"{name}={op.name}: scalar_tensor_tensor takes arithmetic "
                "operators only; bitvec operators are not supported (S16)")
    require(op1 not in UNARY_ALU_OPS, ins, f"op1={op1.name} is unary; op1 combines with the operand1 tensor")
    data = ins.srcs[0]
    tile0, operand1 = _stt_operands(ins)
    require_same_shape(ins, operand1, data, "operand1", "data")
    require_same_shape(ins, ins.dst, data, "dst", "data")
    _require_not_both_psum(ins, data, operand1, "data and operand1")
    if tile0 is not None:
        _require_tile(ins, tile0, data, "operand0", bitvec=False)
    _require_operand(ins, op0, "operand0", tile0 is not None, bitvec=False)
    _require_free_limit(ins, chip)


def _cycles_scalar_tensor_tensor(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``N`` if data, operand1 and dst are bf16, op0 subtract, op1 multiply and N even, else
    ``2N``; stride penalty; ``max(MIN_II, .)`` (see the module docstring)."""
    data = ins.srcs[0]
    _, operand1 = _stt_operands(ins)
    n = data.free_size
    fast = (all(ap.dtype is DType.bfloat16 for ap in (data, operand1, ins.dst))
            and _alu(ins, "op0") is AluOp.subtract and _alu(ins, "op1") is AluOp.multiply and n % 2 == 0)
    return _cycles(ins, chip, n if fast else 2 * n)


def _ref_scalar_tensor_tensor(ins: Instruction, mem: RefMemory) -> None:
    op0, op1 = _alu(ins, "op0"), _alu(ins, "op1")
    tile0, operand1 = _stt_operands(ins)
    x = mem.read(ins.srcs[0])
    s = _ref_operand(ins, mem, tile0, "operand0", x.shape, bitvec=False)
    x = alu_np(op0, s, x) if _flag(ins, "reverse0") else alu_np(op0, x, s)
    y = mem.read(operand1)
    x = alu_np(op1, y, x) if _flag(ins, "reverse1") else alu_np(op1, x, y)
    mem.write(ins.dst, x)


def _encode_scalar_tensor_tensor(ins: Instruction) -> tuple[list[int], list[float]]:
    tile0 = _flag(ins, "operand0_is_tile")
    ints = [int(_alu(ins, "op0")), int(_alu(ins, "op1")), _flag(ins, "reverse0"), _flag(ins, "reverse1"),
            _slot(1) if tile0 else _NO_SLOT, _slot(1 + tile0)]
    return ints, [0.0 if tile0 else float(ins.imm.get("operand0", 0.0))]


@njit(cache=True)
def _nb_scalar_tensor_tensor(row, frow, bases):
    op0, op1, rev0, rev1 = row[IMM], row[IMM + 1], row[IMM + 2] != 0, row[IMM + 3] != 0
    slot0, slot1 = row[IMM + 4], row[IMM + 5]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    offs, off1, offd = row_offsets(row, SRC0), row_offsets(row, slot1), row_offsets(row, DST)
    a, b = f32_rows(row, SRC0, bases, offs), f32_rows(row, slot1, bases, off1)
    o = u32_rows(row, DST, bases, offd)
    if (a.size and b.size and o.size and _in_place_or_disjoint(row, bases, SRC0)
            and _in_place_or_disjoint(row, bases, slot1)):
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
        _apply_rows_f32(op0, x, s0, n, rev0)
        _combine_f32(op1, x, y, rev1)
        store_rows_f32(row, DST, bases, p0, offd, x)


# ---------------------------------------------------------------- tensor_copy

def _check_tensor_copy(ins: Instruction, chip: ChipSpec) -> None:
    _require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    require_same_shape(ins, ins.dst, ins.srcs[0], "dst", "src")
    _require_free_limit(ins, chip)


def _cycles_tensor_copy(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE ``N / perf-mode speedup`` (S23, S10); ScalarE ``N / scalar_engine_16bit_speedup`` for
    16-bit in+out (S23, S11); GpSimd ``N`` (S23). Stride penalty; ``max(MIN_II, .)``."""
    src, dst = ins.srcs[0], ins.dst
    n = src.free_size
    if ins.engine is Engine.VECTOR:
        return _cycles(ins, chip, n, _vector_perf_speedup(src, dst, chip))
    if ins.engine is Engine.SCALAR:
        return _cycles(ins, chip, n, _scalar_speedup(src, dst, chip))
    return _cycles(ins, chip, n)


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
    _require_known_immediates(ins, frozenset({"value"}))
    require_operands(ins, 0)
    value = ins.imm.get("value")
    require(isinstance(value, numbers.Real), ins, f"value={value!r} must be a number")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        require(abs(int(value)) < 2**63, ins, f"value={value} does not fit 64 bits")
    _require_free_limit(ins, chip)


def _cycles_memset(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE (S23): ``N/2`` for zero into bf16/fp16, else ``N``; GpSimd ``N``. Stride penalty;
    ``max(MIN_II, .)``."""
    n = ins.dst.free_size
    value = float(ins.imm["value"])
    zero = value == 0 and math.copysign(1.0, value) > 0  # +0.0: all-zero bits
    if ins.engine is Engine.VECTOR and zero and ins.dst.dtype.is_16bit_float:
        return _cycles(ins, chip, n / 2)
    return _cycles(ins, chip, n)


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
    _require_known_immediates(ins, frozenset({"reverse_pred"}))
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
    _require_not_both_psum(ins, src, predicate, "src and predicate")
    _require_free_limit(ins, chip)


def _cycles_copy_predicated(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``N`` if one of src and predicate is in PSUM, ``2N`` if both are in SBUF. Stride
    penalty; ``max(MIN_II, .)``."""
    src, predicate = ins.srcs
    one_in_psum = (src.memory is Memory.PSUM) != (predicate.memory is Memory.PSUM)
    n = src.free_size
    return _cycles(ins, chip, n if one_in_psum else 2 * n)


def _ref_copy_predicated(ins: Instruction, mem: RefMemory) -> None:
    src, predicate = ins.srcs
    take = (mem.read_int(predicate) != 0) != _flag(ins, "reverse_pred")
    old = mem.read_raw(ins.dst)
    mem.write_raw(ins.dst, np.where(take, mem.read_raw(src), old))


def _encode_copy_predicated(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(_flag(ins, "reverse_pred"))], []


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
    _require_known_immediates(ins, frozenset())
    require_operands(ins, 3)
    predicate, on_true, on_false = ins.srcs
    require_same_shape(ins, ins.dst, on_true, "dst", "on_true")
    require_same_shape(ins, predicate, on_true, "predicate", "on_true")
    require_same_shape(ins, on_false, on_true, "on_false", "on_true")
    if not predicate.dtype.is_int:
        raise fail(ins, f"predicate is {predicate.dtype.name}; it must be an integer dtype (S16)", DtypeError)
    in_psum = [ap.describe() for ap in ins.srcs if ap.memory is Memory.PSUM]
    require(len(in_psum) <= 1, ins, f"at most one input may be in PSUM; {', '.join(in_psum)} are")
    _require_free_limit(ins, chip)


def _cycles_select(ins: Instruction, chip: ChipSpec) -> float:
    """``2N`` (two data inputs, as tensor_tensor; not in S23). Stride penalty; ``max(MIN_II, .)``."""
    return _cycles(ins, chip, 2 * ins.dst.free_size)


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
    OpDef(Opcode.TENSOR_TENSOR, _check_tensor_tensor, _cycles_tensor_tensor, _ref_tensor_tensor,
          _encode_tensor_tensor, _nb_tensor_tensor),
    OpDef(Opcode.TENSOR_SCALAR, _check_tensor_scalar, _cycles_tensor_scalar, _ref_tensor_scalar,
          _encode_tensor_scalar, _nb_tensor_scalar),
    OpDef(Opcode.SCALAR_TENSOR_TENSOR, _check_scalar_tensor_tensor, _cycles_scalar_tensor_tensor,
          _ref_scalar_tensor_tensor, _encode_scalar_tensor_tensor, _nb_scalar_tensor_tensor),
    OpDef(Opcode.TENSOR_COPY, _check_tensor_copy, _cycles_tensor_copy, _ref_tensor_copy,
          no_immediates, _nb_tensor_copy),
    OpDef(Opcode.MEMSET, _check_memset, _cycles_memset, _ref_memset, _encode_memset, _nb_memset),
    OpDef(Opcode.TENSOR_COPY_PREDICATED, _check_copy_predicated, _cycles_copy_predicated,
          _ref_copy_predicated, _encode_copy_predicated, _nb_copy_predicated),
    OpDef(Opcode.SELECT, _check_select, _cycles_select, _ref_select, _encode_select, _nb_select),
]
