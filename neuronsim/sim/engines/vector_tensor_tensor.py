"""tensor_tensor, ``dst = data1 op data2`` element by element, on VectorE and GpSimd
(``ir.OPCODE_ENGINES``) — checks, semantics (numpy reference and Numba) and cost side by side.

Numerics, identical in both executors (the operators are ``alu.py``'s):

- Arithmetic operators: both sources are read as fp32, the operator is one fp32 operation rounded
  once (``alu_f32`` / ``alu_np``), and the result rounds to the destination dtype once, on the write.
- Bit operators (``BITVEC_ALU_OPS``) need integer dtypes on every operand and work on the integer
  values (S16: "treated as bit patterns"); the result wraps to the destination's width (``alu_int``).
- On GpSimd with every tile int32/uint32, native integer arithmetic (S16: "exact results for all
  32-bit integer values") for add, subtract, multiply, max, min, abs_max, abs_min, comparisons and
  logical operators, wrapping to the destination's width (``alu.native_int``); other operators
  (divide, power, mod) keep the fp32 path.

Cost, in cycles of the issuing engine (S23 table in trainium-hardware.md §2.8, v3 perf modes §2.3;
every number from the ChipSpec), N = elements per partition, then the stride penalty and
``max(MIN_II, ...)`` (``common.elementwise_cycles``):

- VectorE: ``N`` if one input is in PSUM and the other in SBUF, or everything is bf16, the op is
  add/subtract/multiply, all three are contiguous and both inputs are in SBUF; else ``2N``. Then
  ``/ vector_perf_mode_other_16bit_speedup`` when both inputs are in SBUF and all three tensors are
  16-bit floats (the v3 mode comes on top of the legacy formula).
- GpSimd: ``2N`` (nothing is documented): each GpSimd core reads its 16 partitions through one
  512-bit interface (S9), one fp32 per partition per cycle, so two inputs take two passes, as on
  VectorE.

The kernel streams the tile through blocks of partitions (see ``alu.py``), or, on plain fp32 rows
whose destination is the same elements as each source or shares no byte with it, takes one fused
pass (``_fused_tt_f32``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1
from neuronsim.sim.engines.alu import (
    MODE_BITVEC,
    MODE_FLOAT,
    MODE_NATIVE_INT,
    NATIVE_INT_ALU_OPS,
    NATIVE_INT_DTYPES,
    alu_f32,
    alu_np,
    bit_op_np,
    combine_f32,
    combine_int,
    combine_native_int,
    native_int_np,
)
from neuronsim.sim.engines.common import (
    OpDef,
    alu_immediate,
    elementwise_cycles,
    require,
    require_free_limit,
    require_int_operands,
    require_known_immediates,
    require_not_both_psum,
    require_operands,
    require_same_shape,
)
from neuronsim.sim.ir import BITVEC_ALU_OPS, UNARY_ALU_OPS, AluOp, Engine, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import (
    F_DTYPE,
    ap_free,
    ap_parts,
    block_rows,
    f32_row,
    f32_rows,
    load_rows_f32,
    load_rows_i64,
    row_offsets,
    same_start_or_disjoint,
    store_rows_f32,
    store_rows_i64,
    u32_row,
    u32_rows,
)
from neuronsim.sim.memory.numerics import canonical_f32_bits
from neuronsim.sim.memory.reference import RefMemory

TT_FAST_BF16_OPS = frozenset({AluOp.add, AluOp.subtract, AluOp.multiply})  # S23 tensor_tensor
_ADD, _SUB, _MUL = int(AluOp.add), int(AluOp.subtract), int(AluOp.multiply)


def _tt_mode(ins: Instruction) -> int:
    op = alu_immediate(ins, "op")
    if op in BITVEC_ALU_OPS:
        return MODE_BITVEC
    tiles = (ins.dst, *ins.srcs)
    if (ins.engine is Engine.GPSIMD and op in NATIVE_INT_ALU_OPS
            and all(ap.dtype in NATIVE_INT_DTYPES for ap in tiles)):
        return MODE_NATIVE_INT
    return MODE_FLOAT


def _check_tensor_tensor(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 2)
    require_known_immediates(ins, frozenset({"op"}))
    op = alu_immediate(ins, "op")
    require(op not in UNARY_ALU_OPS, ins, f"op={op.name} is unary; tensor_tensor takes a binary operator")
    data1, data2 = ins.srcs
    require_same_shape(ins, data1, data2, "data1", "data2")
    require_same_shape(ins, ins.dst, data1, "dst", "data1")
    require_not_both_psum(ins, data1, data2, "data1 and data2")
    if op in BITVEC_ALU_OPS:
        require_int_operands(ins, [(data1, "data1"), (data2, "data2"), (ins.dst, "dst")], "bit operators")
    require_free_limit(ins, chip)


def _cycles_tensor_tensor(ins: Instruction, chip: ChipSpec) -> float:
    """VectorE (S23 + S10): ``N`` if one input in PSUM and one in SBUF, or all bf16 + add/sub/mul +
    contiguous + both in SBUF; else ``2N``; ``/ vector_perf_mode_other_16bit_speedup`` with both
    inputs in SBUF and all tensors 16-bit. GpSimd: ``2N``. Then the stride penalty, ``max(MIN_II, .)``."""
    data1, data2 = ins.srcs
    n = data1.free_size
    if ins.engine is Engine.GPSIMD:
        return elementwise_cycles(ins, chip, 2 * n)
    tiles = (data1, data2, ins.dst)
    both_sbuf = data1.memory is Memory.SBUF and data2.memory is Memory.SBUF
    mixed = {data1.memory, data2.memory} == {Memory.SBUF, Memory.PSUM}
    fast_bf16 = (both_sbuf and alu_immediate(ins, "op") in TT_FAST_BF16_OPS
                 and all(ap.dtype is DType.bfloat16 and ap.is_contiguous_free() for ap in tiles))
    n_term = n if (mixed or fast_bf16) else 2 * n
    speedup = 1.0
    if both_sbuf and all(ap.dtype.is_16bit_float for ap in tiles):
        speedup = float(chip.vector_perf_mode_other_16bit_speedup)
    return elementwise_cycles(ins, chip, n_term, speedup)


def _ref_tensor_tensor(ins: Instruction, mem: RefMemory) -> None:
    op = alu_immediate(ins, "op")
    data1, data2 = ins.srcs
    mode = _tt_mode(ins)
    if mode == MODE_FLOAT:
        mem.write(ins.dst, alu_np(op, mem.read(data1), mem.read(data2)))
    elif mode == MODE_BITVEC:
        mem.write_int(ins.dst, bit_op_np(op, mem.read_int(data1), mem.read_int(data2), ins.dst.dtype))
    else:
        mem.write_int(ins.dst, native_int_np(op, mem.read_int(data1), mem.read_int(data2), ins.dst.dtype))


def _encode_tensor_tensor(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(alu_immediate(ins, "op")), _tt_mode(ins)], []


# Fused fp32 paths: when every operand is plain fp32 with contiguous rows (access.f32_rows) and the
# destination is either disjoint from each source or the very same elements, read, compute and
# write in one pass. NaN inputs are not canonicalized here: whether a result is NaN never depends
# on a NaN's payload, and the store canonicalizes every NaN result, so the bits are the same.

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


@njit(cache=True)
def _nb_tensor_tensor(row, frow, bases):
    op, mode = row[IMM], row[IMM + 1]
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    off1, off2, offd = row_offsets(row, SRC0), row_offsets(row, SRC1), row_offsets(row, DST)
    block = block_rows(parts, n)
    if mode == MODE_FLOAT:
        a, b = f32_rows(row, SRC0, bases, off1), f32_rows(row, SRC1, bases, off2)
        o = u32_rows(row, DST, bases, offd)
        if (a.size and b.size and o.size and same_start_or_disjoint(row, SRC0, DST, bases)
                and same_start_or_disjoint(row, SRC1, DST, bases)):
            _fused_tt_f32(op, a, b, o)
            return
        xb = np.empty(block * n, dtype=np.float32)
        yb = np.empty(block * n, dtype=np.float32)
        for p0 in range(0, parts, block):
            m = min(block, parts - p0) * n
            x, y = xb[:m], yb[:m]
            load_rows_f32(row, SRC0, bases, p0, off1, x)
            load_rows_f32(row, SRC1, bases, p0, off2, y)
            combine_f32(op, x, y, False)
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
            combine_int(op, xi, yi, False, code)
        else:
            combine_native_int(op, xi, yi, code)
        store_rows_i64(row, DST, bases, p0, offd, xi)


OPS = [
    OpDef(Opcode.TENSOR_TENSOR, _check_tensor_tensor, _cycles_tensor_tensor, _ref_tensor_tensor,
          _encode_tensor_tensor, _nb_tensor_tensor),
]
