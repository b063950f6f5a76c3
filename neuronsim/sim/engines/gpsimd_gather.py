"""GpSimd gathers within partitions: nc_n_gather — checks, semantics (numpy reference and Numba) and
cost side by side.

nc_n_gather (S16): ``dst[p, k] = data[p, indices[p, k]]`` with ``data``'s free dims flattened
row-major, bit for bit (dst has data's dtype); ``indices`` are uint32 with ``dst``'s elements per
partition. An index outside ``[0, data elements per partition)`` is an error with the kernel line,
raised while running before anything is written (the Numba kernel signals it through the executor's
status slot, as an indirect DMA does).

Cost (assumed; the docs give no figure): the instruction is ``n = ceil(data elements per partition /
512)`` ISA instruction groups (S16), each paying GpSimd's start cost (``gpsimd_start_cycles``, S23),
plus one cycle per gathered element: ``n * GPSIMD_START + N_out`` GpSimd cycles.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError, OutOfBoundsError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, SRC0, SRC1
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    no_immediates,
    require,
    require_known_immediates,
    require_operands,
)
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import ap_free, gather_i64, gather_raw, scatter_raw
from neuronsim.sim.memory.reference import RefMemory

N_GATHER_GROUP = 512  # data elements per partition one ISA instruction group covers (S16)


def _check_n_gather(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset())
    require_operands(ins, 2)
    data, indices = ins.srcs
    if ins.dst.dtype is not data.dtype:
        raise fail(ins, f"dst is {ins.dst.dtype.name} but data is {data.dtype.name}; nc_n_gather keeps "
                   "data's dtype", DtypeError)
    if indices.dtype is not DType.uint32:
        raise fail(ins, f"indices are {indices.dtype.name}; nc_n_gather takes uint32 indices", DtypeError)
    require(data.partitions == indices.partitions == ins.dst.partitions, ins,
            f"data, indices and dst have {data.partitions}, {indices.partitions} and {ins.dst.partitions} "
            "partitions; they must match")
    require(indices.free_size == ins.dst.free_size, ins, f"indices have {indices.free_size} elements per "
            f"partition but dst has {ins.dst.free_size}; they must match")


def _cycles_n_gather(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``ceil(N_data / 512) * GPSIMD_START + N_out``."""
    groups = math.ceil(ins.srcs[0].free_size / N_GATHER_GROUP)
    return float(groups * chip.gpsimd_start_cycles + ins.dst.free_size)


def index_out_of_range(ins: Instruction) -> OutOfBoundsError:
    """The one message both executors give for an index outside data's elements."""
    data, indices = ins.srcs
    return fail(ins, f"an index in {indices.describe()} is outside 0..{data.free_size - 1}, the elements per "
                f"partition of data {data.describe()}", OutOfBoundsError)


def _ref_n_gather(ins: Instruction, mem: RefMemory) -> None:
    x = mem.read_raw(ins.srcs[0])
    idx = mem.read_int(ins.srcs[1])
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[1]):
        raise index_out_of_range(ins)
    mem.write_raw(ins.dst, np.take_along_axis(x, idx, axis=1))


@njit(cache=True)
def _nb_n_gather(row, frow, bases):
    idx = gather_i64(row, SRC1, bases)
    n = ap_free(row, SRC0)
    parts, k = idx.shape
    for p in range(parts):
        for j in range(k):
            if idx[p, j] < 0 or idx[p, j] >= n:
                bases[bases.size - 1] = 1
                return
    x = gather_raw(row, SRC0, bases)
    out = np.empty((parts, k), dtype=np.int64)
    for p in range(parts):
        for j in range(k):
            out[p, j] = x[p, idx[p, j]]
    scatter_raw(row, DST, bases, out)


OPS = [OpDef(Opcode.NC_N_GATHER, _check_n_gather, _cycles_n_gather, _ref_n_gather, no_immediates,
             _nb_n_gather, index_out_of_range)]
