"""MX (OCP Microscaling) family: ``QUANTIZE_MX`` on VectorE and ``NC_MATMUL_MX`` on TensorE —
checks, semantics and costs (NeuronCore-v4 on; S16 ``quantize_mx`` / ``nc_matmul_mx``, S11 the
Trainium3 guide's "Quad-MXFP8/MXFP4 Matmul", the OCP MX v1.0 formats).

Storage. An MX data element packs four values along the contraction dim: ``float8_e4m3fn_x4`` /
``float8_e5m2_x4`` are 32-bit words of four fp8 bytes, ``float4_e2m1fn_x4`` a 16-bit word of four
fp4 nibbles; value ``j`` sits in byte (nibble) ``j`` from the least significant one (assumed: the
docs do not give the order). The IR stores them as uint32 / uint16 with the format in the
immediates (``FMT_*``). Scales are E8M0 bytes (uint8): ``2^(b - 127)``, 255 is NaN.

Layout (S11). Data ``[P, F]`` (P a multiple of 32, <= 128) holds ``[P, 4F]`` values; a scaling
group is 8 partitions x one x4 element (32 values). Group ``(p // 8, f)``'s scale sits in scale
partition ``row(p) = (p // 32) * 32 + (p % 32) // 8`` (each 32-partition quadrant keeps its four
scale rows at its top; the AP's start partition gives the 0/4/8/12 packing offset), column ``f``.

- ``QUANTIZE_MX``: ``dst`` (x4 data), ``dst2`` (scales) from ``src`` bf16/fp16 ``[P, 4F]``. Per
  group, ``amax = max |v|``, scale ``X = 2^(floor(log2 amax) - (Emax - 1))`` (Emax = 8 for e4m3fn,
  15 for e5m2; S16: twice the OCP sample scale, NKI 0.5 on), or with ``ocp_scale`` the OCP sample
  scale ``2^(floor(log2 amax) - Emax)`` (NKI 0.3/0.4: ``neuronsim/nki_releases.py``); ``2^-127``
  for an all-zero group; each value is ``v / X`` rounded to the fp8 format (nearest even),
  saturating at the format's largest finite value (the OCP sample conversion's clamp; only its scale reaches
  it). A group with inf/NaN gets the NaN scale (assumed). Cost: ``max(MIN_II, 4F / 4)`` VectorE
  cycles (S11: four elements per partition per cycle).
- ``NC_MATMUL_MX``: ``dst[m, n] = (dst if accumulate) + sum_k S[k, m] * M[k, n]`` over
  ``k = 4p + j``, ``S`` / ``M`` the dequantized values ``value * scale`` (exact in fp32), summed as
  ``NC_MATMUL`` does (fp32 fused multiply-adds, k in order). dst fp32 or bf16 PSUM. Cost: the bf16
  matmul formula on the x4 shapes, ``max(min(MM_INIT, M), N)`` (S11: 4x the bf16 contraction per
  instruction at the bf16 rate).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numba import njit

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1, SRC2, SRC3
from neuronsim.sim.engines.common import OpDef, fail, max_ii, partition_rows, require, require_operands
from neuronsim.sim.engines.tensor import check_psum_bank, core_generation, matmul_f32, matmul_np
from neuronsim.sim.ir import AccessPattern, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import (
    F_PARTS,
    F_PITCH,
    F_START,
    gather_f32,
    gather_raw,
    scatter_f32,
    scatter_raw,
)
from neuronsim.sim.memory.numerics import _encode_e4m3fn, _encode_e5m2, encode
from neuronsim.sim.memory.reference import RefMemory

FMT_E4M3FN, FMT_E5M2, FMT_E2M1FN = 0, 1, 2
FORMAT_NAMES = {FMT_E4M3FN: "float8_e4m3fn_x4", FMT_E5M2: "float8_e5m2_x4", FMT_E2M1FN: "float4_e2m1fn_x4"}
STORAGE = {FMT_E4M3FN: DType.uint32, FMT_E5M2: DType.uint32, FMT_E2M1FN: DType.uint16}
_EMAX = {FMT_E4M3FN: 8, FMT_E5M2: 15}
_FP8_MAX = {FMT_E4M3FN: 448.0, FMT_E5M2: 57344.0}  # largest finite values (OCP MX v1.0 formats)
_ELEMENT_DTYPE = {FMT_E4M3FN: DType.float8_e4m3fn, FMT_E5M2: DType.float8_e5m2}
_MX_FROM_GENERATION = 4
GROUP_PARTITIONS, QUADRANT = 8, 32

# Value tables (OCP MX v1.0 formats, via ml_dtypes): fp8 bytes, fp4 nibbles, E8M0 scale bytes.
_E4M3FN_VALUES = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
_E5M2_VALUES = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float32)
_E2M1FN_VALUES = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
_E8M0_VALUES = np.array([math.ldexp(1.0, b - 127) for b in range(255)] + [math.nan], dtype=np.float32)


def scale_row(p: int) -> int:
    """The scale partition of data partition ``p`` (relative to the scale AP's start)."""
    return (p // QUADRANT) * QUADRANT + (p % QUADRANT) // GROUP_PARTITIONS


def _require_v4(ins: Instruction, chip: ChipSpec) -> None:
    require(core_generation(chip) >= _MX_FROM_GENERATION, ins,
            f"MX instructions exist on NeuronCore-v4 (trn3) and newer; this chip is NeuronCore-"
            f"{chip.neuron_core_version}")


def _check_layout(ins: Instruction, data: AccessPattern, scale: AccessPattern, role: str) -> None:
    p = data.partitions
    require(p % QUADRANT == 0 and p <= 128, ins,
            f"{role} has {p} partitions; MX data spans a multiple of 32 partitions, at most 128")
    if scale.dtype is not DType.uint8:
        raise fail(ins, f"{role} scale dtype {scale.dtype.name}; MX scales are E8M0 bytes (uint8)",
                   DtypeError)
    need = scale_row(p - 1) + 1
    require(scale.partitions >= need and scale.free_size == data.free_size, ins,
            f"{role} scale {scale.describe()} must cover {need} partitions x {data.free_size} (one E8M0 "
            f"byte per group of 8 partitions x 1 x4 element, in the group's quadrant)")


def _fmt(ins: Instruction, key: str) -> int:
    fmt = ins.imm.get(key)
    require(fmt in FORMAT_NAMES, ins, f"{key}={fmt!r} is not an MX format code {sorted(FORMAT_NAMES)}")
    return fmt


def _scale_ap_row(ap: AccessPattern, row: int) -> AccessPattern:
    step = ap.pattern[0][0]
    return AccessPattern(ap.tensor, ap.offset + row * step, ((step, 1),) + ap.pattern[1:])


# ---------------------------------------------------------------- quantize_mx (VectorE)

def _check_quantize(ins: Instruction, chip: ChipSpec) -> None:
    _require_v4(ins, chip)
    require_operands(ins, 1)
    require(ins.dst2 is not None, ins, "needs dst2, the scale tile")
    fmt = _fmt(ins, "fmt")
    require(fmt in _EMAX, ins, "quantize_mx writes fp8 x4 data (float8_e4m3fn_x4 / float8_e5m2_x4), not fp4")
    unknown = sorted(set(ins.imm) - {"fmt", "ocp_scale"})
    require(not unknown, ins, f"has unknown immediates {unknown}; known: ['fmt', 'ocp_scale']")
    src, dst = ins.srcs[0], ins.dst
    for role, ap in (("src", src), ("dst", dst), ("dst_scale", ins.dst2)):
        require(ap.memory is Memory.SBUF, ins, f"{role} {ap.describe()} must be in SBUF")
    if src.dtype not in (DType.bfloat16, DType.float16):
        raise fail(ins, f"src dtype {src.dtype.name}; quantize_mx reads bfloat16 or float16", DtypeError)
    if dst.dtype is not DType.uint32:
        raise fail(ins, f"dst stores {dst.dtype.name}; fp8 x4 data is 32-bit words", DtypeError)
    require(src.partitions == dst.partitions and src.free_size == 4 * dst.free_size, ins,
            f"src {src.partitions}x{src.free_size} must be dst {dst.partitions}x{dst.free_size} with 4 "
            f"values per x4 element")
    _check_layout(ins, dst, ins.dst2, "dst")


def _quantize_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``max(MIN_II, N / 4)``, N = source elements per partition (S11: 4 per partition per cycle)."""
    return max_ii(ins.srcs[0].free_size / 4, chip)


def _scale_byte(amax: float, emax: int, ocp: bool) -> int:
    if not math.isfinite(amax):
        return 255
    if amax == 0.0:
        return 0
    exponent = math.frexp(amax)[1] - 1  # floor(log2 amax), exact
    return min(254, max(0, exponent - (emax if ocp else emax - 1) + 127))


def _ref_quantize(ins: Instruction, mem: RefMemory) -> None:
    fmt, ocp = ins.imm["fmt"], bool(ins.imm.get("ocp_scale"))
    p, f = ins.dst.partitions, ins.dst.free_size
    groups = mem.read(ins.srcs[0]).reshape(p // GROUP_PARTITIONS, GROUP_PARTITIONS, f, 4)
    amax = np.abs(groups).max(axis=(1, 3))  # NaN if any value is NaN
    scale = np.array([[_scale_byte(float(a), _EMAX[fmt], ocp) for a in row] for row in amax], dtype=np.int64)
    top = np.float32(_FP8_MAX[fmt])
    q = np.clip(groups / _E8M0_VALUES[scale][:, None, :, None], -top, top)  # NaN stays NaN
    codes = encode(q.reshape(p, f, 4), int(_ELEMENT_DTYPE[fmt])).view(np.uint8).astype(np.int64)
    mem.write_raw(ins.dst, (codes[..., 0] | codes[..., 1] << 8 | codes[..., 2] << 16 | codes[..., 3] << 24)
                  .astype(np.uint32))
    for g in range(p // GROUP_PARTITIONS):
        at = _scale_ap_row(ins.dst2, scale_row(g * GROUP_PARTITIONS))
        mem.write_raw(at, scale[g:g + 1].astype(np.uint8))


@njit(cache=True)
def _nb_scale_byte(amax, scale_emax):
    if amax != amax or amax == np.inf:
        return 255
    if amax == 0.0:
        return 0
    exponent = math.frexp(np.float64(amax))[1] - 1
    return min(254, max(0, exponent - scale_emax + 127))


@njit(cache=True)
def _nb_quantize(row, frow, bases):
    fmt = row[IMM]
    emax = 8 if fmt == FMT_E4M3FN else 15
    scale_emax = emax if row[IMM + 1] != 0 else emax - 1
    top = np.float32(448.0) if fmt == FMT_E4M3FN else np.float32(57344.0)
    src = gather_f32(row, SRC0, bases)
    p, f = src.shape[0], src.shape[1] // 4
    packed = np.zeros((p, f), np.int64)
    scales = np.empty((p // GROUP_PARTITIONS, f), np.int64)
    for g in range(p // GROUP_PARTITIONS):
        for c in range(f):
            amax = np.float32(0.0)
            nan = False
            for r in range(g * GROUP_PARTITIONS, (g + 1) * GROUP_PARTITIONS):
                for j in range(4):
                    a = abs(src[r, 4 * c + j])
                    if a != a:
                        nan = True
                    elif a > amax:
                        amax = a
            b = 255 if nan else _nb_scale_byte(amax, scale_emax)
            scales[g, c] = b
            x = _E8M0_VALUES[b]
            for r in range(g * GROUP_PARTITIONS, (g + 1) * GROUP_PARTITIONS):
                for j in range(4):
                    q = np.float32(src[r, 4 * c + j] / x)
                    if q > top:
                        q = top
                    elif q < -top:
                        q = -top
                    code = _encode_e4m3fn(q) if fmt == FMT_E4M3FN else _encode_e5m2(q)
                    packed[r, c] |= np.int64(code) << (8 * j)
    scatter_raw(row, DST, bases, packed)
    one = row.copy()
    one[DST2 + F_PARTS] = 1
    for g in range(p // GROUP_PARTITIONS):
        r = (g * GROUP_PARTITIONS // QUADRANT) * QUADRANT + g % (QUADRANT // GROUP_PARTITIONS)
        one[DST2 + F_START] = row[DST2 + F_START] + r * row[DST2 + F_PITCH]
        scatter_raw(one, DST2, bases, scales[g:g + 1])


def _encode_quantize(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.imm["fmt"]), int(bool(ins.imm.get("ocp_scale")))], []


# ---------------------------------------------------------------- nc_matmul_mx (TensorE)

_MATMUL_MX_IMM = frozenset({"stationary_fmt", "moving_fmt", "accumulate"})


def _check_matmul(ins: Instruction, chip: ChipSpec) -> None:
    _require_v4(ins, chip)
    require_operands(ins, 4)
    unknown = sorted(set(ins.imm) - _MATMUL_MX_IMM)
    require(not unknown, ins, f"has unknown immediates {unknown}; known: {sorted(_MATMUL_MX_IMM)}")
    stationary, moving, s_scale, m_scale = ins.srcs
    dst = ins.dst
    for role, ap, key in (("stationary", stationary, "stationary_fmt"), ("moving", moving, "moving_fmt")):
        fmt = _fmt(ins, key)
        if ap.dtype is not STORAGE[fmt]:
            raise fail(ins, f"{role} stores {ap.dtype.name}; {FORMAT_NAMES[fmt]} data is "
                       f"{STORAGE[fmt].name} words", DtypeError)
    require(stationary.partitions == moving.partitions, ins,
            f"stationary has {stationary.partitions} partitions but moving has {moving.partitions}")
    _check_layout(ins, stationary, s_scale, "stationary")
    _check_layout(ins, moving, m_scale, "moving")
    m, n = stationary.free_size, moving.free_size
    require(m <= chip.matmul_stationary_free_max and m % 2 == 0, ins,
            f"stationary free size {m} must be even and at most {chip.matmul_stationary_free_max}")
    require(dst.memory is Memory.PSUM and dst.partitions == m and dst.free_size == n, ins,
            f"dst {dst.describe()} must be a [{m}, {n}] PSUM tile")
    if dst.dtype not in (DType.float32, DType.bfloat16):
        raise fail(ins, f"dst dtype {dst.dtype.name}; nc_matmul_mx writes float32 or bfloat16", DtypeError)
    limit = chip.psum_bytes_per_partition // dst.dtype.itemsize
    if n > limit:
        raise fail(ins, f"moving free size {n} exceeds {limit}, all of PSUM for {dst.dtype.name}",
                   ConstraintError)
    check_psum_bank(ins, chip)


def _matmul_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``max(min(MM_INIT, M), N)`` TensorE cycles on the x4 shapes (S11, S23)."""
    stationary, moving = ins.srcs[0], ins.srcs[1]
    return float(max(min(chip.mm_init_latency_cycles, stationary.free_size), moving.free_size))


def _dequantize_np(words: np.ndarray, scales: np.ndarray, fmt: int) -> np.ndarray:
    """fp32 [4P, F] (k = 4p + j) of x4 words [P, F] with their scale rows."""
    p, f = words.shape
    if fmt == FMT_E2M1FN:
        parts = [_E2M1FN_VALUES[(words >> (4 * j)) & 0xF] for j in range(4)]
    else:
        table = _E4M3FN_VALUES if fmt == FMT_E4M3FN else _E5M2_VALUES
        parts = [table[(words >> (8 * j)) & 0xFF] for j in range(4)]
    rows = np.array([scale_row(r) for r in range(p)])
    scale = _E8M0_VALUES[scales[rows]]
    return (np.stack(parts, axis=1) * scale[:, None, :]).astype(np.float32).reshape(4 * p, f)


def _ref_matmul(ins: Instruction, mem: RefMemory) -> None:
    stationary, moving, s_scale, m_scale = ins.srcs
    s = _dequantize_np(mem.read_raw(stationary).astype(np.int64), mem.read_raw(s_scale).astype(np.int64),
                       ins.imm["stationary_fmt"])
    m = _dequantize_np(mem.read_raw(moving).astype(np.int64), mem.read_raw(m_scale).astype(np.int64),
                       ins.imm["moving_fmt"])
    total = matmul_np(s, m)
    if ins.imm.get("accumulate"):
        total = mem.read(ins.dst) + total
    mem.write(ins.dst, total)


@njit(cache=True)
def _nb_dequantize(words, scales, fmt):
    p, f = words.shape
    out = np.empty((4 * p, f), np.float32)
    for r in range(p):
        s_row = (r // QUADRANT) * QUADRANT + (r % QUADRANT) // GROUP_PARTITIONS
        for c in range(f):
            x = _E8M0_VALUES[scales[s_row, c]]
            w = words[r, c]
            for j in range(4):
                if fmt == FMT_E2M1FN:
                    v = _E2M1FN_VALUES[(w >> (4 * j)) & 0xF]
                elif fmt == FMT_E4M3FN:
                    v = _E4M3FN_VALUES[(w >> (8 * j)) & 0xFF]
                else:
                    v = _E5M2_VALUES[(w >> (8 * j)) & 0xFF]
                out[4 * r + j, c] = np.float32(v * x)
    return out


@njit(cache=True)
def _nb_matmul(row, frow, bases):
    s = _nb_dequantize(gather_raw(row, SRC0, bases), gather_raw(row, SRC2, bases), row[IMM])
    m = _nb_dequantize(gather_raw(row, SRC1, bases), gather_raw(row, SRC3, bases), row[IMM + 1])
    total = matmul_f32(s, m)
    if row[IMM + 2] != 0:
        total = gather_f32(row, DST, bases) + total
    scatter_f32(row, DST, bases, total)


def _touched_matmul(ins: Instruction) -> list[tuple[AccessPattern, bool]]:
    """The data words, and of each scale tile only the rows ``scale_row`` reads: the first four
    partitions of each quadrant the data spans (fewer when the data has fewer than 32 partitions)."""
    stationary, moving, s_scale, m_scale = ins.srcs
    rows = min(stationary.partitions, QUADRANT) // GROUP_PARTITIONS
    out = [(stationary, False), (moving, False)]
    for scale in (s_scale, m_scale):
        out += [(partition_rows(scale, q, rows), False) for q in range(0, stationary.partitions, QUADRANT)]
    if ins.imm.get("accumulate"):
        out.append((ins.dst, False))
    return out + [(ins.dst, True)]


def _encode_matmul(ins: Instruction) -> tuple[list[int], list[float]]:
    imm = ins.imm
    return [int(imm["stationary_fmt"]), int(imm["moving_fmt"]), int(bool(imm.get("accumulate")))], []


OPS = [
    OpDef(Opcode.QUANTIZE_MX, _check_quantize, _quantize_cycles, _ref_quantize, _encode_quantize,
          _nb_quantize),
    OpDef(Opcode.NC_MATMUL_MX, _check_matmul, _matmul_cycles, _ref_matmul, _encode_matmul, _nb_matmul,
          touched=_touched_matmul),
]
