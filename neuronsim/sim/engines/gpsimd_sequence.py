"""GpSimd sequence_bounds — checks, semantics (numpy reference and Numba) and cost side by side.

S16 (and the SDK's test_nki_isa_sequence_bounds, whose numpy model this follows): ``segment_ids``
is one partition of ``n`` non-negative ids (float32 or int32, free dims flattened), id 0 marking
padding. ``dst`` (float32 or int32, one partition of ``2 n``: its first ``n`` elements are the
starts, the next ``n`` the ends; NKI's ``[1, 2, n]``) gets, for each element, the first index of
its run of equal ids and one past the last; padding gets start ``n`` and end ``-1``. A run is
consecutive equal ids (an id that comes back later starts a new run). Ids compare as the source's
values (fp32 for float32, so ``-0.0`` is padding and NaN never equals its neighbour).

Cost (assumed; the docs give no figure): a forward and a backward pass over the ids on one GpSimd
core, ``GPSIMD_START + 2 n`` GpSimd cycles.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0
from neuronsim.sim.engines.common import OpDef, fail, require, require_known_immediates, require_operands
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import gather_f32, gather_i64, scatter_f32, scatter_i64
from neuronsim.sim.memory.reference import RefMemory

BOUNDS_DTYPES = frozenset({DType.float32, DType.int32})


def _check_bounds(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 1)
    src, dst = ins.srcs[0], ins.dst
    for role, ap in (("segment_ids", src), ("dst", dst)):
        if ap.dtype not in BOUNDS_DTYPES:
            raise fail(ins, f"{role} is {ap.dtype.name}; sequence_bounds takes float32 or int32", DtypeError)
    require(src.partitions == 1 and dst.partitions == 1, ins, f"segment_ids has {src.partitions} partitions "
            f"and dst {dst.partitions}; sequence_bounds works on one partition")
    require(dst.free_size == 2 * src.free_size, ins, f"dst has {dst.free_size} elements; it must hold "
            f"a start and an end for each of the {src.free_size} ids ([1, 2, {src.free_size}])")


def _cycles_bounds(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``GPSIMD_START + 2 n`` (a forward and a backward pass)."""
    return float(chip.gpsimd_start_cycles + 2 * ins.srcs[0].free_size)


def _bounds(ids: np.ndarray) -> np.ndarray:
    """[2 n]: starts, then ends (exclusive); padding (id 0) gets n and -1."""
    n = ids.size
    starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
    for i in range(n):
        if ids[i] == 0:
            starts[i] = n
        elif i > 0 and ids[i] == ids[i - 1]:
            starts[i] = starts[i - 1]
        else:
            starts[i] = i
    for i in range(n - 1, -1, -1):
        if ids[i] == 0:
            ends[i] = -1
        elif i < n - 1 and ids[i] == ids[i + 1]:
            ends[i] = ends[i + 1]
        else:
            ends[i] = i + 1
    return np.concatenate([starts, ends])


def _ref_bounds(ins: Instruction, mem: RefMemory) -> None:
    src = ins.srcs[0]
    ids = (mem.read_int(src) if src.dtype.is_int else mem.read(src))[0]
    out = _bounds(ids)[None, :]
    if ins.dst.dtype.is_int:
        mem.write_int(ins.dst, out)
    else:
        mem.write(ins.dst, out.astype(np.float32))


def _encode_bounds(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.srcs[0].dtype.is_int), int(ins.dst.dtype.is_int)], []


@njit(cache=True)
def _nb_bounds(row, frow, bases):
    if row[IMM]:
        ids = gather_i64(row, SRC0, bases)[0].astype(np.float64)  # int32 ids are exact in float64
    else:
        ids = gather_f32(row, SRC0, bases)[0].astype(np.float64)
    n = ids.size
    out = np.empty((1, 2 * n), dtype=np.int64)
    for i in range(n):
        if ids[i] == 0:
            out[0, i] = n
        elif i > 0 and ids[i] == ids[i - 1]:
            out[0, i] = out[0, i - 1]
        else:
            out[0, i] = i
    for i in range(n - 1, -1, -1):
        if ids[i] == 0:
            out[0, n + i] = -1
        elif i < n - 1 and ids[i] == ids[i + 1]:
            out[0, n + i] = out[0, n + i + 1]
        else:
            out[0, n + i] = i + 1
    if row[IMM + 1]:
        scatter_i64(row, DST, bases, out)
    else:
        scatter_f32(row, DST, bases, out.astype(np.float32))


OPS = [OpDef(Opcode.SEQUENCE_BOUNDS, _check_bounds, _cycles_bounds, _ref_bounds, _encode_bounds, _nb_bounds)]
