"""TensorE: nc_matmul and nc_transpose (TensorE and VectorE) — checks, semantics and costs.

Semantics.

- ``NC_MATMUL``: ``dst[m, n] = (dst[m, n] if accumulate else 0) + sum_k stationary[k, m] * moving[k, n]``
  (``double_row`` changes the cost only).
  The sum runs in fp32 over k = 0..K-1 in order as a chain of fused multiply-adds
  (``acc = fma(s, m, acc)``: the exact product added and rounded once, as a PE's multiply-accumulate
  does), and the sum is then added onto the old PSUM value — the same roundings in both executors,
  so they agree bit for bit. Inputs are read exactly (bf16/fp16/tf32/fp8 -> fp32); their products
  are exact in fp32, so for them fused and unfused accumulation are the same; only fp32 inputs
  depend on the fusion, which is our assumption (the PE's internal rounding is not published).
- ``NC_TRANSPOSE``: ``dst[f, p] = data[p, f]``, moving bits (v3 on: TensorE transpose is
  bit-accurate with NaN/Inf, S16), any dtype, ``dst`` of the same dtype. Extra free dims are
  flattened, as NKI does.

Costs (engine cycles; the scheduler divides by the engine clock and applies TensorE throttling).
Each cost is the instruction's issue interval: back to back, the next instruction starts that long
after this one; its results land ``tensor_engine_pipeline_latency_cycles`` later (sim/schedule.py).

- matmul: two steps, as on hardware and in Neuron Explorer's Tensor / TensorMatrix rows.
  LoadStationary loads the stationary operand into the PE array: ``N_stationary /
  load_stationary_speedup`` cycles (S20: up to 4x faster than an MM of the same free size), x4 for
  fp32; it runs in the background, while the previous MultiplyMoving streams. MultiplyMoving:
  ``max(min(MM_INIT, N_stationary), N_moving)`` with ``MM_INIT = mm_init_latency_cycles``
  (S23, S9), times ``fp32_matmul_cost_factor`` (4) when an input is fp32; tf32 runs at bf16 speed
  (S23), and fp8 x fp8 is charged ``fp8_matmul_cost_factor`` (1). FP8 ``double_row`` (S10, S16:
  [K, 2, M] x [K, 2, N], 2x the FLOPs in the time of one pass) arrives as its two row halves, the
  second accumulating, each marked ``double_row`` and charged half of both steps.
- TensorE transpose: ``max(P, min(MM_INIT, F))`` (S23: data is the stationary, an identity the
  moving operand). 4-byte data goes through v3's transpose mode, which is ``transpose_fp32_speedup``
  (2x) faster than the fp32 matmul path (S10), so it costs ``fp32_matmul_cost_factor /
  transpose_fp32_speedup`` = 2x the bf16 figure; tf32 moves at bf16 speed like its matmul.
- VectorE transpose (<= 32x32): ``max(MIN_II, N)`` VectorE cycles, N = elements per partition (S23).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    max_ii,
    no_immediates,
    require,
    require_operands,
)
from neuronsim.sim.ir import AccessPattern, Engine, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import ap_parts, f32_rows, gather_f32, row_offsets, scatter_f32
from neuronsim.sim.memory.copy import transpose_raw
from neuronsim.sim.memory.numerics import CANONICAL_NAN_BITS, canonical_f32
from neuronsim.sim.memory.reference import RefMemory

# S16: nc_matmul inputs. float8_e4m3fn exists from NeuronCore-v4 (gen4) on; fp32/tf32 only pair
# with fp32/tf32.
MATMUL_INPUT_DTYPES = frozenset({DType.float8_e4m3, DType.float8_e5m2, DType.bfloat16, DType.float16,
                                 DType.tfloat32, DType.float32})
MATMUL_FP32_CLASS = frozenset({DType.float32, DType.tfloat32})
_E4M3FN_FROM_GENERATION = 4
# v2/v3 land a matmul in one PSUM bank (accumulation groups are per bank, S9); a v4 matmul may
# span all 8 (S11).
_MULTI_BANK_FROM_GENERATION = 4

_MATMUL_IMM = frozenset({"accumulate", "double_row"})


def core_generation(chip: ChipSpec) -> int:
    """The NeuronCore generation number: ``"v3"`` -> 3."""
    return int(chip.neuron_core_version.lstrip("v"))


def _require_imm_keys(ins: Instruction, known: frozenset) -> None:
    unknown = sorted(set(ins.imm) - known)
    require(not unknown, ins, f"has unknown immediates {unknown}; known: {sorted(known)}")


def _free_extent(ap: AccessPattern) -> tuple[int, int]:
    """First and last free element offsets (within a partition of its tensor) the AP touches."""
    col0 = ap.offset % ap.tensor.free_size
    lo = hi = col0
    for step, num in ap.free_dims:
        reach = step * (num - 1)
        lo += min(0, reach)
        hi += max(0, reach)
    return lo, hi


def check_psum_bank(ins: Instruction, chip: ChipSpec) -> None:
    """v2/v3: a TensorE result lands in one PSUM bank.

    The byte span each partition's result covers must fit a bank. Whether it also avoids
    crossing a bank boundary is checked when the tensor carries an explicit ``address``; a tensor
    the simulator places itself and that fits a bank is never placed across one (layout.py). An
    AP inside a larger unplaced tensor is not checked for crossing here, because ``check`` does
    not see the placement.
    """
    dst = ins.dst
    if dst.memory is not Memory.PSUM or core_generation(chip) >= _MULTI_BANK_FROM_GENERATION:
        return
    bank = chip.psum_bank_bytes_per_partition
    item = dst.dtype.itemsize
    lo, hi = _free_extent(dst)
    first, end = lo * item, (hi + 1) * item
    require(end - first <= bank, ins,
            f"writes {end - first} bytes per partition of {dst.describe()}; on NeuronCore-"
            f"{chip.neuron_core_version} a TensorE result must fit one {bank}-byte PSUM bank "
            f"(psum_bank_bytes_per_partition)")
    if dst.tensor.address is not None:
        base = dst.tensor.address[1]
        require((base + first) // bank == (base + end - 1) // bank, ins,
                f"writes PSUM bytes {base + first}..{base + end - 1} of each partition ({dst.describe()}), "
                f"crossing a {bank}-byte bank boundary; on NeuronCore-{chip.neuron_core_version} a "
                f"TensorE result must sit in one bank")


# ---------------------------------------------------------------- nc_matmul

def _accumulate(ins: Instruction) -> bool:
    return bool(ins.imm.get("accumulate", False))


def _check_matmul(ins: Instruction, chip: ChipSpec) -> None:
    _require_imm_keys(ins, _MATMUL_IMM)
    require_operands(ins, 2)
    stationary, moving = ins.srcs
    dst = ins.dst
    k = stationary.partitions
    require(moving.partitions == k, ins,
            f"stationary has {k} partitions (K) but moving has {moving.partitions}; the contraction "
            f"dims must match")
    require(k <= chip.pe_array_rows, ins,
            f"contracts over K = {k} partitions; the PE array has {chip.pe_array_rows} rows (pe_array_rows)")
    m, n = stationary.free_size, moving.free_size
    require(m <= chip.matmul_stationary_free_max, ins,
            f"stationary free size {m} exceeds {chip.matmul_stationary_free_max} "
            f"(matmul_stationary_free_max)")
    require(n <= chip.matmul_moving_free_max, ins,
            f"moving free size {n} exceeds {chip.matmul_moving_free_max} (matmul_moving_free_max)")
    require(dst.partitions == m and dst.free_size == n, ins,
            f"dst is {dst.partitions}x{dst.free_size} (partitions x free) but stationary [{k}, {m}] x "
            f"moving [{k}, {n}] gives [{m}, {n}]")
    require(dst.memory is Memory.PSUM, ins, f"writes {dst.describe()}; nc_matmul writes PSUM")
    if dst.dtype is not DType.float32:
        raise fail(ins, f"dst dtype {dst.dtype.name} is not allowed; nc_matmul accumulates into float32 PSUM",
                   DtypeError)
    allowed = set(MATMUL_INPUT_DTYPES)
    if core_generation(chip) >= _E4M3FN_FROM_GENERATION:
        allowed.add(DType.float8_e4m3fn)
    for role, ap in (("stationary", stationary), ("moving", moving)):
        if ap.dtype not in allowed:
            raise fail(ins, f"{role} dtype {ap.dtype.name} is not a matmul input on NeuronCore-"
                       f"{chip.neuron_core_version}; allowed: {sorted(d.name for d in allowed)}", DtypeError)
    if (stationary.dtype in MATMUL_FP32_CLASS) != (moving.dtype in MATMUL_FP32_CLASS):
        raise fail(ins, f"pairs {stationary.dtype.name} (stationary) with {moving.dtype.name} (moving); "
                   f"float32/tfloat32 inputs only pair with float32/tfloat32", DtypeError)
    check_psum_bank(ins, chip)


def _matmul_dtype_factor(stationary: AccessPattern, moving: AccessPattern, chip: ChipSpec) -> float:
    if DType.float32 in (stationary.dtype, moving.dtype):
        return float(chip.fp32_matmul_cost_factor)
    if stationary.dtype.is_fp8 and moving.dtype.is_fp8:
        return float(chip.fp8_matmul_cost_factor)
    return 1.0


def _double_row_share(ins: Instruction) -> float:
    """FP8 double-row (S10, S16): the two row halves of a [K, 2, *] matmul together take one pass, so
    each is charged half."""
    return 0.5 if ins.imm.get("double_row") else 1.0


def _matmul_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``max(min(MM_INIT, N_stationary), N_moving)`` TensorE cycles, x4 for fp32 inputs (S23), half for
    each row half of an FP8 double-row matmul."""
    stationary, moving = ins.srcs
    base = max(min(chip.mm_init_latency_cycles, stationary.free_size), moving.free_size)
    return float(base) * _matmul_dtype_factor(stationary, moving, chip) * _double_row_share(ins)


def load_stationary_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """LoadStationary, the step before each nc_matmul's MultiplyMoving: ``N_stationary /
    load_stationary_speedup`` TensorE cycles (S20: LS up to 4x faster than an MM of the same free
    size, LS_II ~ 128/4 = 32 cycles), times the same dtype factor as the matmul (x4 for fp32)."""
    stationary, moving = ins.srcs
    factor = _matmul_dtype_factor(stationary, moving, chip) * _double_row_share(ins)
    return stationary.free_size / chip.load_stationary_speedup * factor


def fma_f32_np(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded fp32 ``a * b + c`` (IEEE fusedMultiplyAdd) of float32 arrays, in float64:
    the product of two fp32 values is exact in float64; the sum, rounded to odd (TwoSum gives its
    exact error; an inexact sum with an even last bit moves one ulp towards the error), then
    rounds to fp32 exactly as the infinitely precise sum would, since float64 carries more than
    fp32's 24 + 2 bits. Non-finite sums are left as they are."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    b_virtual = s - p
    err = (p - (s - b_virtual)) + (c64 - b_virtual)
    bits = s.view(np.int64)
    inexact_even = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
    away_from_zero = (err > 0) == (s > 0)
    s = np.where(inexact_even, (bits + np.where(away_from_zero, 1, -1)).view(np.float64), s)
    return s.astype(np.float32)


# Rounding the float64 sum ``p + c`` (exact product of two fp32 values, plus an fp32) straight to
# fp32 is wrong only where that sum lies exactly on an fp32 tie (low 29 of its 52 fraction bits
# 1000...0: the first rounding may have moved it there) or where fp32 is subnormal (its ties lie
# elsewhere); matmul_np takes that short cut and sends just those elements through fma_f32_np.
_TIE_BITS, _TIE_LOW = np.int64(1 << 28), np.int64((1 << 29) - 1)
_MIN_NORMAL_EXP = -126  # fp32's smallest normal binade


def _min_binade(x: np.ndarray) -> int:
    """The lowest binade of a nonzero finite element of ``x`` (a large number if there is none)."""
    finite = np.abs(x[np.isfinite(x) & (x != 0)])
    return int(np.frexp(finite.min())[1]) - 1 if finite.size else 1 << 10


def matmul_np(stationary: np.ndarray, moving: np.ndarray) -> np.ndarray:
    """``stationary.T @ moving`` in fp32: k in order, one fused multiply-add per product
    (``fma_f32_np``, bit for bit). Each partial sum is a multiple of the smallest product's fp32
    granularity, so when that is at least fp32's smallest normal, no nonzero partial sum is
    subnormal and only ties need the exact rounding."""
    s64, m64 = stationary.astype(np.float64), moving.astype(np.float64)
    shape = (stationary.shape[1], moving.shape[1])
    acc, p = np.zeros(shape, np.float64), np.empty(shape, np.float64)
    total = np.zeros(shape, np.float32)
    if not (shape[0] and shape[1]):
        return total
    subnormal_possible = _min_binade(stationary) + _min_binade(moving) - 46 < _MIN_NORMAL_EXP
    bits, test = np.empty(shape, np.int64), np.empty(shape, bool)
    for k in range(stationary.shape[0]):
        np.multiply(s64[k][:, None], m64[k][None, :], out=p)
        s = np.add(p, acc, out=p)  # the float64 sum, in place of the product
        np.bitwise_and(s.view(np.int64), _TIE_LOW, out=bits)
        suspect = np.equal(bits, _TIE_BITS, out=test)
        if subnormal_possible:
            suspect |= (np.abs(s) < 2.0 ** _MIN_NORMAL_EXP) & (s != 0)
        if suspect.any():
            at = np.nonzero(suspect)
            exact = fma_f32_np(stationary[k][at[0]], moving[k][at[1]], total[at])
            np.copyto(total, s, casting="unsafe")
            total[at] = exact
        else:
            np.copyto(total, s, casting="unsafe")
        np.copyto(acc, total)
    return total


def _ref_matmul(ins: Instruction, mem: RefMemory) -> None:
    total = matmul_np(mem.read(ins.srcs[0]), mem.read(ins.srcs[1]))
    if _accumulate(ins):
        total = mem.read(ins.dst) + total
    mem.write(ins.dst, total)


def _encode_matmul(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(_accumulate(ins))], []


# The fp32 matmul kernel. Every result element is a strict chain ``acc = fma(s, m, acc)`` over k in
# order, so the only freedom is which elements to compute together. A register tile of
# ``_TILE_ROWS`` x ``_TILE_LANES * vectors`` results stays in vector registers for the whole k loop
# (one vector FMA per 16 products, no loads or stores of partial sums), written in LLVM IR because
# Numba keeps array accumulators in memory. ``llvm.fma`` is IEEE fusedMultiplyAdd whatever the
# CPU (a libm call where there is no FMA unit), and without fast-math flags LLVM does not reorder
# the chain, so each element sees the same roundings as matmul_np.

_TILE_ROWS, _TILE_LANES = 4, 16
_NAN_BITS = np.uint32(CANONICAL_NAN_BITS[DType.float32])


def _matmul_tile(rows: int, vectors: int):
    """An intrinsic ``tile(out, a, b, k_dim, a_pitch, b_pitch, out_pitch, accumulate)`` (byte
    addresses, pitches in elements; ``k_dim >= 1``): ``t[r, c] = sum_k a[k, r] * b[k, c]`` for
    ``r < rows``, ``c < 16 * vectors``, stored as PSUM stores it: ``out = t`` or, with
    ``accumulate``, ``out = out + t`` (the sum first, then one addition), NaNs canonical."""
    lanes = _TILE_LANES

    def tile(typingctx, out_addr, a_addr, b_addr, k_dim, a_pitch, b_pitch, out_pitch, accumulate):
        sig = types.void(*([types.int64] * 8))

        def codegen(context, builder, signature, args):
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(f32, lanes)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                                 f"llvm.fma.v{lanes}f32")
            out0, a0, b0 = (builder.inttoptr(x, f32.as_pointer()) for x in args[:3])
            k_dim, a_pitch, b_pitch, out_pitch, accumulate = args[3:]
            entry = builder.block
            loop = builder.append_basic_block("tile.k")
            done = builder.append_basic_block("tile.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), entry)
            accs = [builder.phi(vec) for _ in range(rows * vectors)]
            for acc in accs:
                acc.add_incoming(ir.Constant(vec, [0.0] * lanes), entry)
            a_row = builder.gep(a0, [builder.mul(k, a_pitch)])
            b_row = builder.gep(b0, [builder.mul(k, b_pitch)])
            b_vecs = [builder.bitcast(builder.gep(b_row, [ir.Constant(i64, v * lanes)]), vec.as_pointer())
                      for v in range(vectors)]
            xs = [builder.load(ptr, align=4) for ptr in b_vecs]
            undef = ir.Constant(vec, ir.Undefined)
            splat = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)
            new = []
            for r in range(rows):
                s = builder.load(builder.gep(a_row, [ir.Constant(i64, r)]), align=4)
                one = builder.insert_element(undef, s, ir.Constant(i32, 0))
                sv = builder.shuffle_vector(one, undef, splat)
                new += [builder.call(fma, [sv, xs[v], accs[r * vectors + v]]) for v in range(vectors)]
            k_next = builder.add(k, ir.Constant(i64, 1))
            k.add_incoming(k_next, loop)
            for acc, value in zip(accs, new, strict=True):
                acc.add_incoming(value, loop)
            builder.cbranch(builder.icmp_signed("<", k_next, k_dim), loop, done)
            builder.position_at_end(done)
            onto_old = builder.icmp_signed("!=", accumulate, ir.Constant(i64, 0))
            nan = builder.bitcast(ir.Constant(ir.VectorType(i32, lanes), [int(_NAN_BITS)] * lanes), vec)
            for r in range(rows):
                out_row = builder.gep(out0, [builder.mul(ir.Constant(i64, r), out_pitch)])
                for v in range(vectors):
                    at = builder.gep(out_row, [ir.Constant(i64, v * lanes)])
                    ptr = builder.bitcast(at, vec.as_pointer())
                    total = new[r * vectors + v]
                    value = builder.select(onto_old, builder.fadd(builder.load(ptr, align=4), total), total)
                    value = builder.select(builder.fcmp_unordered("uno", value, value), nan, value)
                    builder.store(value, ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    tile.__name__ = tile.__qualname__ = f"_matmul_tile_{rows}x{vectors}"
    return intrinsic(tile)


_tile_4x4, _tile_4x1 = _matmul_tile(_TILE_ROWS, 4), _matmul_tile(_TILE_ROWS, 1)
_tile_1x4, _tile_1x1 = _matmul_tile(1, 4), _matmul_tile(1, 1)  # the rows past the last 4


@intrinsic
def _fma32(typingctx, a, b, c):
    """Scalar fp32 ``a * b + c``, rounded once (``llvm.fma``), for the columns past the tiles."""
    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return types.float32(types.float32, types.float32, types.float32), codegen


@njit(cache=True)
def _matmul_panel(a, b, out, accumulate):
    """``t[r, c] = sum_k a[k, r] * b[k, c]`` (k in order, fused multiply-adds) for [K, R] and [K, C]
    float32 arrays with unit inner stride, stored into ``out`` as ``t`` or, with ``accumulate``,
    ``out + t``, NaNs canonical; register tiles (4 or 1 rows x 64 or 16 columns) where they fit, a
    plain loop for the last < 16 columns. Column panels outside, rows inside: a panel of ``b``
    stays in L1."""
    k_dim, r_dim = a.shape
    c_dim = b.shape[1]
    flag = 1 if accumulate else 0
    a_addr, b_addr, o_addr = a.ctypes.data, b.ctypes.data, out.ctypes.data
    a_pitch, b_pitch, o_pitch = a.strides[0] // 4, b.strides[0] // 4, out.strides[0] // 4
    r_tiled = r_dim - r_dim % _TILE_ROWS
    wide, narrow = 4 * _TILE_LANES, _TILE_LANES
    c0 = 0
    while k_dim > 0 and c_dim - c0 >= narrow:
        width = wide if c_dim - c0 >= wide else narrow
        a_at, b_at, o_at = a_addr, b_addr + 4 * c0, o_addr + 4 * c0
        for r0 in range(0, r_tiled, _TILE_ROWS):
            o = o_at + 4 * r0 * o_pitch
            if width == wide:
                _tile_4x4(o, a_at + 4 * r0, b_at, k_dim, a_pitch, b_pitch, o_pitch, flag)
            else:
                _tile_4x1(o, a_at + 4 * r0, b_at, k_dim, a_pitch, b_pitch, o_pitch, flag)
        for r in range(r_tiled, r_dim):
            o = o_at + 4 * r * o_pitch
            if width == wide:
                _tile_1x4(o, a_at + 4 * r, b_at, k_dim, a_pitch, b_pitch, o_pitch, flag)
            else:
                _tile_1x1(o, a_at + 4 * r, b_at, k_dim, a_pitch, b_pitch, o_pitch, flag)
        c0 += width
    if c0 == c_dim:
        return
    total = np.zeros(c_dim - c0, dtype=np.float32)
    for r in range(r_dim):  # the columns past the last tile (all of them when k_dim == 0)
        total[:] = 0
        for k in range(k_dim):
            s = a[k, r]
            row = b[k]
            for c in range(c0, c_dim):
                total[c - c0] = _fma32(s, row[c], total[c - c0])
        dst = out[r]
        for c in range(c0, c_dim):
            dst[c] = canonical_f32(dst[c] + total[c - c0] if accumulate else total[c - c0])


@njit(cache=True)
def matmul_f32(stationary, moving):
    """Numba twin of :func:`matmul_np` for float32 [K, M] and [K, N] arrays with unit inner stride
    (NaNs canonical). Few moving columns: vectorize along m instead (``out.T`` from swapped roles;
    ``fma(s, m, acc) == fma(m, s, acc)`` bit for bit)."""
    m_dim, n_dim = stationary.shape[1], moving.shape[1]
    if n_dim < _TILE_LANES and m_dim > n_dim:
        out_t = np.empty((n_dim, m_dim), dtype=np.float32)
        _matmul_panel(moving, stationary, out_t, False)
        return np.ascontiguousarray(out_t.T)
    out = np.empty((m_dim, n_dim), dtype=np.float32)
    _matmul_panel(stationary, moving, out, False)
    return out


@njit(cache=True)
def _matmul_operand(row, at, bases):
    """fp32 [K, F] values of a matmul input: a view of memory when it is plain fp32 rows (NaN
    payloads don't matter: a NaN product makes a NaN result, which the store canonicalizes),
    else a converted copy."""
    view = f32_rows(row, at, bases, row_offsets(row, at))
    if view.shape[0] == ap_parts(row, at):
        return view
    return gather_f32(row, at, bases)


@njit(cache=True)
def _nb_matmul(row, frow, bases):
    stationary, moving = _matmul_operand(row, SRC0, bases), _matmul_operand(row, SRC1, bases)
    m_dim, n_dim = stationary.shape[1], moving.shape[1]
    accumulate = row[IMM] != 0
    out = f32_rows(row, DST, bases, row_offsets(row, DST))  # PSUM itself, when plain fp32 rows
    if out.shape[0] == m_dim and not (n_dim < _TILE_LANES and m_dim > n_dim):
        # The panel stores into PSUM in place (PSUM never overlaps the SBUF operands).
        _matmul_panel(stationary, moving, out, accumulate)
        return
    total = matmul_f32(stationary, moving)
    if accumulate:
        total = gather_f32(row, DST, bases) + total
    scatter_f32(row, DST, bases, total)


# ---------------------------------------------------------------- nc_transpose

def _check_transpose(ins: Instruction, chip: ChipSpec) -> None:
    _require_imm_keys(ins, frozenset())
    require_operands(ins, 1)
    data, dst = ins.srcs[0], ins.dst
    p, f = data.partitions, data.free_size
    if ins.engine is Engine.TENSOR:
        max_p, max_f, limit = chip.pe_array_rows, chip.pe_array_cols, "pe_array_rows x pe_array_cols"
    else:
        max_p = max_f = chip.vector_transpose_max_dim
        limit = "vector_transpose_max_dim"
    require(p <= max_p and f <= max_f, ins,
            f"transposes {p}x{f} (partitions x free); {ins.engine.name.lower()} transposes at most "
            f"{max_p}x{max_f} ({limit})")
    require(dst.partitions == f and dst.free_size == p, ins,
            f"dst is {dst.partitions}x{dst.free_size} (partitions x free) but transposing data "
            f"{p}x{f} gives {f}x{p}")
    if dst.dtype != data.dtype:
        raise fail(ins, f"transposes {data.dtype.name} into {dst.dtype.name}; nc_transpose keeps the dtype",
                   DtypeError)
    if ins.engine is Engine.TENSOR:
        check_psum_bank(ins, chip)


def _transpose_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """TensorE: ``max(P, min(MM_INIT, F))``, 4-byte data x fp32 factor / transpose speedup (S23, S10).
    VectorE: ``max(MIN_II, N)`` (S23)."""
    data = ins.srcs[0]
    if ins.engine is Engine.VECTOR:
        return max_ii(data.free_size, chip)
    base = float(max(data.partitions, min(chip.mm_init_latency_cycles, data.free_size)))
    if data.dtype.itemsize == 4 and data.dtype is not DType.tfloat32:
        base *= chip.fp32_matmul_cost_factor / chip.transpose_fp32_speedup
    return base


def _ref_transpose(ins: Instruction, mem: RefMemory) -> None:
    mem.write_raw(ins.dst, np.ascontiguousarray(mem.read_raw(ins.srcs[0]).T))


@njit(cache=True)
def _nb_transpose(row, frow, bases):
    transpose_raw(row, DST, SRC0, bases)


OPS = [
    OpDef(Opcode.NC_MATMUL, _check_matmul, _matmul_cycles, _ref_matmul, _encode_matmul, _nb_matmul),
    OpDef(Opcode.NC_TRANSPOSE, _check_transpose, _transpose_cycles, _ref_transpose, no_immediates,
          _nb_transpose),
]
