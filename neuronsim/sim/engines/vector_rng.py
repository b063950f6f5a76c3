"""VectorE's pseudo-random generator: rng and dropout — checks, semantics (numpy reference and Numba)
and costs side by side. rng also runs on GpSimd (NeuronCore-v3+, S16).

The hardware's PRNG algorithm is not published (v4's is called XORWOW, S11), so the simulator
*assumes* a counter-based generator: both executors then stay stateless and agree bit for bit with
plain 32-bit integer arithmetic (everything mod 2**32; ``fmix32`` is MurmurHash3's finalizer)::

    key = fmix32(seed + 0x9E3779B9);  bits(c) = fmix32(fmix32(c * 0x9E3779B9 + key) ^ key)

The engine's PRNG state is operands, not hidden executor state: ``nisa.set_rng_seed`` copies the
seed into a [1, 1] 32-bit state tile that every later rng/dropout reads as a source (any 32-bit
dtype: its bits are the seed), and the tracer numbers the stream: the ``offset`` immediate counts the
elements the instructions since that seed drew, so successive calls give fresh values and one seed
always gives one sequence (S16). Element (p, j) of a [P, N] destination (j in the access pattern's
row-major free order) is stream element ``offset + p * N + j``.

- rng: each element of dst (int8/16/32, uint8/16/32) takes the low bits of its 32-bit value (S16).
- dropout: ``u = (bits >> 8) * 2**-24`` is uniform on [0, 1); an element is dropped (all-zero bits)
  when ``u < prob`` and kept bit for bit otherwise, so prob 0 keeps everything and prob 1 drops
  everything (S16). prob is an fp32 immediate or a [P, 1] tile (one per partition); dst has data's
  dtype.

Costs (S23, trainium-hardware.md §2.8): dropout ``max(MIN_II, N)``; rng is not in the table and is
charged the same (it writes one tile and reads none, like memset), on VectorE and GpSimd. The S9
stride penalty applies as to the other VectorE instructions.
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    require,
    require_free_limit,
    require_known_immediates,
    require_operands,
    require_same_shape,
)
from neuronsim.sim.ir import AccessPattern, Instruction, Opcode
from neuronsim.sim.memory.access import ap_free, ap_parts, gather_f32, gather_raw, scatter_raw
from neuronsim.sim.memory.reference import RefMemory

RNG_DTYPES = frozenset({DType.int8, DType.int16, DType.int32, DType.uint8, DType.uint16, DType.uint32})
STREAM_PERIOD = 2**32  # stream positions wrap (a 32-bit counter)

_M32 = np.uint64(0xFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B9)
_C1, _C2 = np.uint64(0x85EBCA6B), np.uint64(0xC2B2AE35)
_S8, _S13, _S16 = np.uint64(8), np.uint64(13), np.uint64(16)
_UNIT = np.float32(2.0**-24)


# ---------------------------------------------------------------- the generator (Numba and numpy)

@njit(cache=True, inline="always")
def _fmix32(h):
    h ^= h >> _S16
    h = (h * _C1) & _M32
    h ^= h >> _S13
    h = (h * _C2) & _M32
    return h ^ (h >> _S16)


@njit(cache=True, inline="always")
def _stream_bits(key, c):
    return _fmix32(_fmix32((c * _GOLDEN + key) & _M32) ^ key)


def _fmix32_np(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _S16)
    h = (h * _C1) & _M32
    h = h ^ (h >> _S13)
    h = (h * _C2) & _M32
    return h ^ (h >> _S16)


def stream_bits(seed: int, offset: int, count: int) -> np.ndarray:
    """Stream elements ``offset .. offset + count - 1`` of ``seed`` as uint32 (the reference)."""
    key = _fmix32_np(np.array([(seed + int(_GOLDEN)) & 0xFFFFFFFF], dtype=np.uint64))
    c = (np.arange(count, dtype=np.uint64) + np.uint64(offset)) & _M32
    return _fmix32_np(_fmix32_np((c * _GOLDEN + key) & _M32) ^ key).astype(np.uint32)


def uniform_of(bits: np.ndarray) -> np.ndarray:
    """dropout's uniform on [0, 1) from 32-bit values: the top 24 bits, exact in fp32."""
    return (bits >> np.uint32(8)).astype(np.float32) * _UNIT


# ---------------------------------------------------------------- shared checks

def _require_state(ins: Instruction, state: AccessPattern) -> None:
    require(state.partitions == 1 and state.free_size == 1, ins,
            f"the seed/state tile is {state.partitions}x{state.free_size} (partitions x free); it must be "
            "[1, 1] (S16)")
    if state.dtype.itemsize != 4:
        raise fail(ins, f"the seed/state tile is {state.dtype.name}; it must hold a 32-bit value (S16)",
                   DtypeError)


def _require_offset(ins: Instruction) -> int:
    offset = ins.imm.get("offset", 0)
    require(isinstance(offset, numbers.Integral) and not isinstance(offset, bool)
            and 0 <= offset < STREAM_PERIOD, ins,
            f"offset={offset!r} must be a stream position, a whole number in [0, 2**32)")
    return int(offset)


def _seed_np(mem: RefMemory, state: AccessPattern) -> int:
    return int(np.ascontiguousarray(mem.read_raw(state)).reshape(-1).view(np.uint32)[0])


@njit(cache=True)
def _key_nb(row, at, bases):
    return _fmix32((np.uint64(gather_raw(row, at, bases)[0, 0]) + _GOLDEN) & _M32)


# ---------------------------------------------------------------- rng

def _check_rng(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"offset"}))
    require_operands(ins, 1)
    if ins.dst.dtype not in RNG_DTYPES:
        raise fail(ins, f"dst is {ins.dst.dtype.name}; rng writes an integer dtype: "
                   f"{', '.join(sorted(d.name for d in RNG_DTYPES))} (S16)", DtypeError)
    _require_state(ins, ins.srcs[0])
    _require_offset(ins)
    require_free_limit(ins, chip)


def _cycles_rng(ins: Instruction, chip: ChipSpec) -> float:
    """``max(MIN_II, N)`` on VectorE or GpSimd (assumed, as memset: one tile written). Stride penalty."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _ref_rng(ins: Instruction, mem: RefMemory) -> None:
    dst = ins.dst
    bits = stream_bits(_seed_np(mem, ins.srcs[0]), _require_offset(ins), dst.partitions * dst.free_size)
    mem.write_raw(dst, bits.reshape(dst.partitions, dst.free_size).astype(dst.dtype.numpy))  # low bits


def _encode_rng(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.imm.get("offset", 0)), (1 << 8 * ins.dst.dtype.itemsize) - 1], []


@njit(cache=True)
def _nb_rng(row, frow, bases):
    key = _key_nb(row, SRC0, bases)
    count = ap_parts(row, DST) * ap_free(row, DST)
    start, low_bits = np.uint64(row[IMM]), row[IMM + 1]
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        out[i] = np.int64(_stream_bits(key, (start + np.uint64(i)) & _M32)) & low_bits  # truncation
    scatter_raw(row, DST, bases, out)


# ---------------------------------------------------------------- dropout

def _check_dropout(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"offset", "prob", "prob_is_tile"}))
    is_tile = bool(ins.imm.get("prob_is_tile", False))
    require_operands(ins, 3 if is_tile else 2)
    data, state = ins.srcs[0], ins.srcs[1]
    require_same_shape(ins, ins.dst, data, "dst", "data")
    if ins.dst.dtype != data.dtype:
        raise fail(ins, f"dst is {ins.dst.dtype.name} but data is {data.dtype.name}; they must match (S16)",
                   DtypeError)
    _require_state(ins, state)
    _require_offset(ins)
    if is_tile:
        prob = ins.srcs[2]
        require(prob.partitions == data.partitions and prob.free_size == 1, ins,
                f"prob tile is {prob.partitions}x{prob.free_size}; it must be [{data.partitions}, 1]")
        allowed = (DType.float32,) if data.dtype.is_int else tuple(d for d in DType if d.is_float)
        if prob.dtype not in allowed:
            raise fail(ins, f"prob tile is {prob.dtype.name}; with {data.dtype.name} data it must be one of "
                       f"{', '.join(d.name for d in allowed)} (S16)", DtypeError)
    else:
        value = ins.imm.get("prob")
        require(isinstance(value, numbers.Real) and not isinstance(value, bool), ins,
                f"prob={value!r} must be a number (or a [P, 1] tile with prob_is_tile=True)")
    require_free_limit(ins, chip)


def _cycles_dropout(ins: Instruction, chip: ChipSpec) -> float:
    """``max(MIN_II, N)`` (S23). Stride penalty."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _ref_dropout(ins: Instruction, mem: RefMemory) -> None:
    data, dst = ins.srcs[0], ins.dst
    shape = (dst.partitions, dst.free_size)
    bits = stream_bits(_seed_np(mem, ins.srcs[1]), _require_offset(ins), shape[0] * shape[1]).reshape(shape)
    if ins.imm.get("prob_is_tile", False):
        prob = mem.read(ins.srcs[2]).reshape(-1, 1)
    else:
        prob = np.float32(float(ins.imm["prob"]))
    raw = mem.read_raw(data)
    mem.write_raw(dst, np.where(uniform_of(bits) < prob, np.zeros_like(raw), raw))


def _encode_dropout(ins: Instruction) -> tuple[list[int], list[float]]:
    is_tile = bool(ins.imm.get("prob_is_tile", False))
    return [int(ins.imm.get("offset", 0)), int(is_tile)], [0.0 if is_tile else float(ins.imm["prob"])]


@njit(cache=True)
def _nb_dropout(row, frow, bases):
    data = gather_raw(row, SRC0, bases)
    key = _key_nb(row, SRC1, bases)
    parts, n = data.shape
    if row[IMM + 1] == 1:
        prob = gather_f32(row, SRC2, bases)[:, 0].copy()
    else:
        prob = np.full(parts, np.float32(frow[0]), dtype=np.float32)
    start = np.uint64(row[IMM])
    for p in range(parts):
        for j in range(n):
            bits = _stream_bits(key, (start + np.uint64(p * n + j)) & _M32)
            if np.float32(bits >> _S8) * _UNIT < prob[p]:
                data[p, j] = 0
    scatter_raw(row, DST, bases, data)


OPS = [
    OpDef(Opcode.RNG, _check_rng, _cycles_rng, _ref_rng, _encode_rng, _nb_rng),
    OpDef(Opcode.DROPOUT, _check_dropout, _cycles_dropout, _ref_dropout, _encode_dropout, _nb_dropout),
]
