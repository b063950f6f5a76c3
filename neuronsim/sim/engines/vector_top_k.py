"""VectorE top-8: max8, nc_find_index8 and nc_match_replace8 — checks, semantics (numpy reference and
Numba) and costs side by side. Values are compared as fp32.

Costs are the legacy per-instruction estimates (S23, trainium-hardware.md §2.8) in VectorE cycles,
with N the elements per partition of the data: N for max8 and nc_find_index8; ``max(MIN_II, N)`` for
nc_match_replace8 (the doc's ``min(MIN_II, N)`` read as the max every other entry has).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import (
    OpDef,
    max_ii,
    no_immediates,
    require,
    require_dtype,
    require_known_immediates,
    require_operands,
    require_same_shape,
    require_shape,
    require_vector_free,
)
from neuronsim.sim.ir import AccessPattern, Instruction, Opcode
from neuronsim.sim.memory.access import gather_f32, scatter_f32, scatter_i64
from neuronsim.sim.memory.reference import RefMemory

# max8 / nc_find_index8 (S16): exactly 8 results per partition, from 8 to 16,384 elements read per
# partition. The same in every NKI generation's docs, so it is an ISA constant, not a chip number.
TOP_K = 8
TOP_K_FREE_MAX = 16384
INDEX_DTYPES = (DType.uint16, DType.uint32)  # nc_find_index8 output (S16: uint16 or uint32)
_NOT_FOUND = 2**32 - 1  # nc_find_index8 for a value not present; saturates to the dst dtype's maximum


# ---------------------------------------------------------------- max8

def _check_top_k_data(ins: Instruction, chip: ChipSpec, data: AccessPattern) -> None:
    require(TOP_K <= data.free_size <= TOP_K_FREE_MAX, ins,
            f"data has {data.free_size} elements per partition; {ins.opcode.name.lower()} reads {TOP_K} to "
            f"{TOP_K_FREE_MAX}")
    require_vector_free(ins, chip, data, "data")


def _check_max8(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    _check_top_k_data(ins, chip, ins.srcs[0])
    require_shape(ins, ins.dst, ins.srcs[0].partitions, TOP_K, "dst")


def _cycles_top_k(ins: Instruction, chip: ChipSpec) -> float:
    """S23: N (max8, nc_find_index8)."""
    return float(ins.srcs[0].free_size)


def _ref_max8(ins: Instruction, mem: RefMemory) -> None:
    """The 8 largest values per partition, descending (S16). Assumed where the docs are silent: NaN
    ranks above every number, and equal values (0.0 and -0.0 included) keep their input order."""
    x = mem.read(ins.srcs[0])
    nan = np.isnan(x)
    order = np.lexsort((np.where(nan, np.float32(0), -x), ~nan), axis=-1)  # stable: ties keep order
    mem.write(ins.dst, np.take_along_axis(x, order[:, :TOP_K], axis=1))


@njit(cache=True, inline="always")
def _ranks_above(a, b):
    if a != a:
        return b == b
    if b != b:
        return False
    return a > b


@njit(cache=True)
def _nb_max8(row, frow, bases):
    x = gather_f32(row, SRC0, bases)
    parts, n = x.shape
    out = np.empty((parts, 8), dtype=np.float32)
    for p in range(parts):
        filled = 0
        for j in range(n):
            v = x[p, j]
            pos = filled
            for k in range(filled):
                if _ranks_above(v, out[p, k]):
                    pos = k
                    break
            if pos < 8:
                for k in range(min(filled, 7), pos, -1):
                    out[p, k] = out[p, k - 1]
                out[p, pos] = v
                filled = min(filled + 1, 8)
    scatter_f32(row, DST, bases, out)


# ---------------------------------------------------------------- nc_find_index8

def _check_find_index8(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 2)
    data, vals = ins.srcs
    _check_top_k_data(ins, chip, data)
    require_shape(ins, vals, data.partitions, TOP_K, "vals")
    require_shape(ins, ins.dst, data.partitions, TOP_K, "dst")
    require_dtype(ins, ins.dst, INDEX_DTYPES, "dst")


def _ref_find_index8(ins: Instruction, mem: RefMemory) -> None:
    """Index (from 0, in the row-major order of data's free dims) of the first element equal to each
    of the 8 values (S16). Compared as fp32; NaN matches NaN. Assumed where the docs say
    "undefined": a value not present gives the dst dtype's largest value."""
    x, v = mem.read(ins.srcs[0]), mem.read(ins.srcs[1])
    eq = (x[:, None, :] == v[:, :, None]) | (np.isnan(x)[:, None, :] & np.isnan(v)[:, :, None])
    mem.write_int(ins.dst, np.where(eq.any(axis=2), eq.argmax(axis=2), _NOT_FOUND))


@njit(cache=True)
def _nb_find_index8(row, frow, bases):
    x = gather_f32(row, SRC0, bases)
    v = gather_f32(row, SRC1, bases)
    parts, n = x.shape
    out = np.empty((parts, 8), dtype=np.int64)
    for p in range(parts):
        for k in range(8):
            want = v[p, k]
            found = _NOT_FOUND
            for j in range(n):
                if x[p, j] == want or (x[p, j] != x[p, j] and want != want):
                    found = j
                    break
            out[p, k] = found
    scatter_i64(row, DST, bases, out)

# ---------------------------------------------------------------- nc_match_replace8

def _check_match_replace8(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"imm"}))
    require_operands(ins, 2)
    data, vals = ins.srcs
    _check_top_k_data(ins, chip, data)
    require_shape(ins, vals, data.partitions, TOP_K, "vals")
    require_same_shape(ins, ins.dst, data, "dst", "data")
    if ins.dst2 is not None:
        require_shape(ins, ins.dst2, data.partitions, TOP_K, "dst_idx")
        require_dtype(ins, ins.dst2, INDEX_DTYPES, "dst_idx")


def _cycles_match_replace8(ins: Instruction, chip: ChipSpec) -> float:
    """S23: ``max(MIN_II, N)`` (the doc's ``min`` taken as the max of every other VectorE entry)."""
    return max_ii(ins.srcs[0].free_size, chip)


def _ref_match_replace8(ins: Instruction, mem: RefMemory) -> None:
    """Each of the 8 values, taken in reverse order (vals[7] first), replaces the first element of data
    equal to it that no earlier value matched with ``imm``; dst_idx[k] is that element's index (S16's
    duplicate rule: a repeated value pairs its occurrences with descending columns). Compared as fp32,
    NaN matching NaN; a value not present leaves data alone and gives dst_idx the dtype's largest
    value (assumed, as nc_find_index8)."""
    x, v = mem.read(ins.srcs[0]), mem.read(ins.srcs[1])
    out, idx = x.copy(), np.full(v.shape, _NOT_FOUND, dtype=np.int64)
    imm = np.float32(ins.imm.get("imm", 0.0))
    for p in range(x.shape[0]):
        free = np.ones(x.shape[1], dtype=bool)
        for k in range(TOP_K - 1, -1, -1):
            same = (x[p] == v[p, k]) | (np.isnan(x[p]) & np.isnan(v[p, k]))
            hits = np.flatnonzero(same & free)
            if hits.size:
                free[hits[0]] = False
                out[p, hits[0]] = imm
                idx[p, k] = hits[0]
    mem.write(ins.dst, out)
    if ins.dst2 is not None:
        mem.write_int(ins.dst2, idx)


def _encode_match_replace8(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.dst2 is not None)], [float(np.float32(ins.imm.get("imm", 0.0)))]


@njit(cache=True)
def _nb_match_replace8(row, frow, bases):
    x = gather_f32(row, SRC0, bases)
    v = gather_f32(row, SRC1, bases)
    parts, n = x.shape
    imm = np.float32(frow[0])
    idx = np.full((parts, 8), _NOT_FOUND, dtype=np.int64)
    out = x.copy()
    free = np.ones(n, dtype=np.bool_)
    for p in range(parts):
        free[:] = True
        for k in range(7, -1, -1):
            want = v[p, k]
            for j in range(n):
                if free[j] and (x[p, j] == want or (x[p, j] != x[p, j] and want != want)):
                    free[j] = False
                    out[p, j] = imm
                    idx[p, k] = j
                    break
    scatter_f32(row, DST, bases, out)
    if row[IMM]:
        scatter_i64(row, DST2, bases, idx)

OPS = [
    OpDef(Opcode.MAX8, _check_max8, _cycles_top_k, _ref_max8, no_immediates, _nb_max8),
    OpDef(Opcode.NC_FIND_INDEX8, _check_find_index8, _cycles_top_k, _ref_find_index8, no_immediates,
          _nb_find_index8),
    OpDef(Opcode.NC_MATCH_REPLACE8, _check_match_replace8, _cycles_match_replace8, _ref_match_replace8,
          _encode_match_replace8, _nb_match_replace8),
]
