"""VectorE's XORWOW generator (``nisa.rand2``, NeuronCore-v4) — checks, semantics (numpy reference
and Numba) and cost side by side.

S16: rand2 draws uniform fp32 values in [min, max] from the engine's XORWOW state (S11 names the
algorithm), which ``rand_set_state`` seeds and ``rand_get_state`` reads: per compute lane
(partition), 6 uint32 words on GpSimd and 24 on VectorE. As with ``rng`` (vector_rng.py), the state
is an operand here, not hidden executor state: a [P, 24] uint32 tile the frontend keeps per trace
(``nki/isa/xorwow.py``), read as ``srcs[0]`` and written back as ``dst2`` by every RAND2.

Assumed where the docs are silent (not the hardware's values; deterministic and identical in both
executors, 32-bit integer arithmetic):

- a lane's 24 words are 4 XORWOW generators of 6 words ``(x, y, z, w, v, d)`` each (Marsaglia's
  xorwow, the form cuRAND uses); element ``j`` of a partition (row-major over dst's free dims) comes
  from generator ``j % 4``, each generator stepping once per element it makes::

      t = x ^ (x >> 2); x, y, z, w = y, z, w, v; v = (v ^ (v << 4)) ^ (t ^ (t << 1))
      d = d + 362437; bits = v + d

- ``u = (bits >> 8) * 2**-24`` (uniform on [0, 1), exact in fp32), then
  ``value = min + (max - min) * u``, each step one fp32 operation rounded once, then rounded to dst's
  dtype on the write. ``min``/``max`` are fp32 immediates or [P, 1] fp32 tiles.

Cost (assumed; the docs give no figure): ``max(MIN_II, N)`` VectorE cycles, as ``rng``.
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1, SRC2
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    flag,
    require,
    require_known_immediates,
    require_operands,
    require_shape,
)
from neuronsim.sim.engines.tensor import core_generation
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import ap_free, ap_parts, gather_f32, gather_i64, scatter_f32, scatter_i64
from neuronsim.sim.memory.reference import RefMemory

GENERATORS = 4  # XORWOW generators per VectorE lane (24 state words, S16)
WORDS = 6  # x, y, z, w, v, d
VECTOR_STATE_WORDS, GPSIMD_STATE_WORDS = GENERATORS * WORDS, WORDS  # S16: 24 on VectorE, 6 on GpSimd
RAND2_DTYPES = frozenset({DType.float8_e4m3, DType.float8_e5m2, DType.float16, DType.bfloat16, DType.float32,
                          DType.tfloat32, DType.int8, DType.int16, DType.int32, DType.uint8, DType.uint16,
                          DType.uint32})
_XORWOW_INCREMENT = 362437
_M32 = 0xFFFFFFFF
_IMMEDIATES = frozenset({"min", "max", "min_is_tile", "max_is_tile"})


def _check_rand2(ins: Instruction, chip: ChipSpec) -> None:
    require(core_generation(chip) >= 4, ins, f"rand2 exists on NeuronCore-v4 (trn3) and newer; this chip is "
            f"NeuronCore-{chip.neuron_core_version}")
    require_known_immediates(ins, _IMMEDIATES)
    tiles = [name for name in ("min", "max") if flag(ins, f"{name}_is_tile")]
    require_operands(ins, 1 + len(tiles))
    dst, state = ins.dst, ins.srcs[0]
    if dst.dtype not in RAND2_DTYPES:
        raise fail(ins, f"dst is {dst.dtype.name}; rand2 writes {sorted(d.name for d in RAND2_DTYPES)}",
                   DtypeError)
    require(ins.dst2 is not None and ins.dst2.tensor is state.tensor and ins.dst2.offset == state.offset
            and ins.dst2.pattern == state.pattern, ins,
            "dst2 must be the state operand itself (the generator advances its state)")
    if state.dtype is not DType.uint32:
        raise fail(ins, f"the XORWOW state is {state.dtype.name}; it is uint32 words", DtypeError)
    require_shape(ins, state, dst.partitions, VECTOR_STATE_WORDS, "the XORWOW state")
    for name, tile in zip(tiles, ins.srcs[1:], strict=True):
        require_shape(ins, tile, dst.partitions, 1, f"the {name} tile")
        if tile.dtype is not DType.float32:
            raise fail(ins, f"the {name} tile is {tile.dtype.name}; it must be float32", DtypeError)
    for name in ("min", "max"):
        if name not in tiles:
            require(isinstance(ins.imm.get(name), numbers.Real), ins,
                    f"{name}={ins.imm.get(name)!r} must be a number (or pass a [P, 1] tile)")
    if not tiles:
        require(np.float32(ins.imm["min"]) < np.float32(ins.imm["max"]), ins,
                f"min={ins.imm['min']} must be below max={ins.imm['max']}")


def _cycles_rand2(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``max(MIN_II, N)`` (as rng)."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _xorwow(s: np.ndarray) -> int:
    """One step of generator state ``s`` (6 ints, updated in place); its 32 output bits."""
    x = int(s[0])
    t = (x ^ (x >> 2)) & _M32
    s[0], s[1], s[2], s[3] = s[1], s[2], s[3], s[4]
    v = int(s[4])
    s[4] = ((v ^ ((v << 4) & _M32)) ^ (t ^ ((t << 1) & _M32))) & _M32
    s[5] = (int(s[5]) + _XORWOW_INCREMENT) & _M32
    return (int(s[4]) + int(s[5])) & _M32


def _bounds(ins: Instruction, read, parts: int) -> tuple[np.ndarray, np.ndarray]:
    tiles = iter(ins.srcs[1:])
    out = []
    for name in ("min", "max"):
        if flag(ins, f"{name}_is_tile"):
            out.append(read(next(tiles))[:, 0])
        else:
            out.append(np.full(parts, np.float32(ins.imm[name]), np.float32))
    return out[0], out[1]


def _ref_rand2(ins: Instruction, mem: RefMemory) -> None:
    dst = ins.dst
    state = mem.read_int(ins.srcs[0])
    lo, hi = _bounds(ins, mem.read, dst.partitions)
    span = (hi - lo).astype(np.float32)
    out = np.empty((dst.partitions, dst.free_size), np.float32)
    for p in range(dst.partitions):
        for j in range(dst.free_size):
            g = j % GENERATORS
            bits = _xorwow(state[p, g * WORDS:(g + 1) * WORDS])
            u = np.float32(bits >> 8) * np.float32(2.0**-24)
            out[p, j] = np.float32(lo[p] + np.float32(span[p] * u))
    mem.write(dst, out)
    mem.write_int(ins.dst2, state)


def _encode_rand2(ins: Instruction) -> tuple[list[int], list[float]]:
    ints = [int(flag(ins, "min_is_tile")), int(flag(ins, "max_is_tile"))]
    return ints, [float(ins.imm.get("min", 0.0)), float(ins.imm.get("max", 0.0))]


@njit(cache=True)
def _nb_rand2(row, frow, bases):
    min_tile, max_tile = row[IMM], row[IMM + 1]
    state = gather_i64(row, SRC0, bases)
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    lo = gather_f32(row, SRC1, bases)[:, 0] if min_tile else np.full(parts, np.float32(frow[0]), np.float32)
    if max_tile:
        hi = gather_f32(row, SRC2 if min_tile else SRC1, bases)[:, 0]
    else:
        hi = np.full(parts, np.float32(frow[1]), np.float32)
    out = np.empty((parts, n), np.float32)
    unit = np.float32(2.0**-24)
    for p in range(parts):
        span = np.float32(hi[p] - lo[p])
        for j in range(n):
            b = (j % 4) * 6  # GENERATORS, WORDS
            x = state[p, b]
            t = (x ^ (x >> 2)) & 0xFFFFFFFF
            state[p, b] = state[p, b + 1]
            state[p, b + 1] = state[p, b + 2]
            state[p, b + 2] = state[p, b + 3]
            v = state[p, b + 4]
            state[p, b + 3] = v
            v = ((v ^ ((v << 4) & 0xFFFFFFFF)) ^ (t ^ ((t << 1) & 0xFFFFFFFF))) & 0xFFFFFFFF
            state[p, b + 4] = v
            d = (state[p, b + 5] + 362437) & 0xFFFFFFFF  # _XORWOW_INCREMENT
            state[p, b + 5] = d
            bits = (v + d) & 0xFFFFFFFF
            u = np.float32(bits >> 8) * unit
            out[p, j] = np.float32(lo[p] + np.float32(span * u))
    scatter_f32(row, DST, bases, out)
    scatter_i64(row, DST2, bases, state)


OPS = [OpDef(Opcode.RAND2, _check_rand2, _cycles_rand2, _ref_rand2, _encode_rand2, _nb_rand2)]
