"""GpSimd gathers within partitions: nc_n_gather, local_gather and nonzero_with_count — checks,
semantics (numpy reference and Numba) and costs side by side.

nc_n_gather (S16): ``dst[p, k] = data[p, indices[p, k]]`` with ``data``'s free dims flattened
row-major, bit for bit (dst has data's dtype); ``indices`` are uint32 with ``dst``'s elements per
partition. An index outside ``[0, data elements per partition)`` is an error with the kernel line,
raised while running before anything is written (the Numba kernel signals it through the executor's
status slot, as an indirect DMA does).

Cost (assumed; the docs give no figure): the instruction is ``n = ceil(data elements per partition /
512)`` ISA instruction groups (S16), each paying GpSimd's start cost (``gpsimd_start_cycles``, S23),
plus one cycle per gathered element: ``n * GPSIMD_START + N_out`` GpSimd cycles.

local_gather (S16 and its numpy semantics, the SDK's ``test_nki_isa_local_gather.py``): each of the
8 GpSimd cores serves 16 partitions and gathers with its own indices: the uint16 ``index`` of its 16
partitions, flattened partition first (column-major), of which the first ``num_valid_indices`` are
used. Every partition ``p`` of the core then takes, for the k-th index ``i``, the
``num_elem_per_idx`` elements ``src[p, i .. i + num_elem_per_idx - 1]`` (src's free dims flattened;
the index counts elements) into ``dst[p, k * num_elem_per_idx ...]``, bit for bit. An index reaching
past src's elements is undefined on hardware: here an error with the kernel line, raised while
running before anything is written. Cost (assumed; no published figure): ``GPSIMD_START + K * n``
GpSimd cycles for K indices of n elements (the cores in parallel, one element a cycle).

nonzero_with_count (S16, NeuronCore-v3+): each of the 8 GpSimd cores reads and writes only the first
of its 16 partitions (partitions 0, 16, ..., 112; counted from the access's first partition, which
the start-partition rule puts on a multiple of 16). For such a partition with src values
``x[0..T-1]`` (float32 or int32, free dims flattened row-major) dst (int32, T + 1 elements) gets the
positions ``i + index_offset`` of the nonzero ``x[i]`` in order, then ``padding_val`` up to T
elements, then the count. "Nonzero" is the value's (``x != 0``: -0.0 is zero, NaN is not). Every
other dst partition keeps its contents (dst counts as read).

Cost (assumed; the docs give no figure): the cores run in parallel, each scanning its partition and
writing its T + 1 results at one element a cycle: ``GPSIMD_START + T + 1`` GpSimd cycles.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError, OutOfBoundsError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    no_immediates,
    partition_rows,
    require,
    require_known_immediates,
    require_operands,
)
from neuronsim.sim.engines.gpsimd import INT32_MAX, INT32_MIN, PARTITIONS_PER_GPSIMD_CORE
from neuronsim.sim.ir import AccessPattern, Instruction, Opcode
from neuronsim.sim.memory.access import (
    ap_free,
    ap_parts,
    gather_f32,
    gather_i64,
    gather_raw,
    scatter_i64,
    scatter_raw,
)
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


LOCAL_GATHER_ELEMS = (1, 2, 4, 8, 16, 32)  # num_elem_per_idx values (S16)
LOCAL_GATHER_MAX_INDICES = 4096  # indices per core (S16)


def _check_local_gather(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"num_elem_per_idx", "num_valid_indices"}))
    require_operands(ins, 2)
    src, index = ins.srcs
    n, k = ins.imm.get("num_elem_per_idx", 1), ins.imm.get("num_valid_indices")
    if ins.dst.dtype is not src.dtype:
        raise fail(ins, f"dst is {ins.dst.dtype.name} but src_buffer is {src.dtype.name}; local_gather keeps "
                   "src_buffer's dtype", DtypeError)
    if index.dtype is not DType.uint16:
        raise fail(ins, f"index is {index.dtype.name}; local_gather takes uint16 indices", DtypeError)
    require(src.partitions == index.partitions == ins.dst.partitions, ins,
            f"src_buffer, index and dst have {src.partitions}, {index.partitions} and {ins.dst.partitions} "
            "partitions; they must match")
    require(src.partitions % PARTITIONS_PER_GPSIMD_CORE == 0, ins, f"src_buffer has {src.partitions} "
            f"partitions; local_gather needs a multiple of {PARTITIONS_PER_GPSIMD_CORE} (a GpSimd core's)")
    require(n in LOCAL_GATHER_ELEMS, ins, f"num_elem_per_idx={n!r}; one of {LOCAL_GATHER_ELEMS}")
    per_core = index.free_size * PARTITIONS_PER_GPSIMD_CORE
    require(isinstance(k, (int, np.integer)) and 1 <= k <= min(per_core, LOCAL_GATHER_MAX_INDICES), ins,
            f"num_valid_indices={k!r}; 1 to min(the {per_core} indices of a core's 16 partitions, "
            f"{LOCAL_GATHER_MAX_INDICES})")
    require(ins.dst.free_size == k * n, ins, f"dst has {ins.dst.free_size} elements per partition; "
            f"num_valid_indices * num_elem_per_idx = {k * n}")


def _cycles_local_gather(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``GPSIMD_START + K * n``."""
    return float(chip.gpsimd_start_cycles + ins.dst.free_size)


def local_gather_out_of_range(ins: Instruction) -> OutOfBoundsError:
    src, index = ins.srcs
    n = ins.imm.get("num_elem_per_idx", 1)
    return fail(ins, f"an index in {index.describe()} reaches past the {src.free_size} elements per "
                f"partition of src_buffer {src.describe()} (index + num_elem_per_idx={n}; undefined on "
                "hardware)",
                OutOfBoundsError)


def _core_indices(idx: np.ndarray, k: int) -> np.ndarray:
    """[cores, k]: each core's 16 partitions of indices flattened partition first, the first k."""
    cores = idx.shape[0] // PARTITIONS_PER_GPSIMD_CORE
    per_core = idx.reshape(cores, PARTITIONS_PER_GPSIMD_CORE, -1).transpose(0, 2, 1).reshape(cores, -1)
    return per_core[:, :k]


def _ref_local_gather(ins: Instruction, mem: RefMemory) -> None:
    src, index = ins.srcs
    n, k = ins.imm.get("num_elem_per_idx", 1), ins.imm["num_valid_indices"]
    starts = _core_indices(mem.read_int(index), k)
    if starts.size and starts.max() + n > src.free_size:
        raise local_gather_out_of_range(ins)
    x = mem.read_raw(src)
    cols = (starts[:, :, None] + np.arange(n)).reshape(starts.shape[0], -1)  # [cores, k * n]
    rows = np.repeat(cols, PARTITIONS_PER_GPSIMD_CORE, axis=0)  # the core's indices for each partition
    mem.write_raw(ins.dst, np.take_along_axis(x, rows, axis=1))


def _encode_local_gather(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.imm.get("num_elem_per_idx", 1)), int(ins.imm["num_valid_indices"])], []


@njit(cache=True)
def _nb_local_gather(row, frow, bases):
    n, k = row[IMM], row[IMM + 1]
    idx = gather_i64(row, SRC1, bases)
    parts, size = idx.shape[0], ap_free(row, SRC0)
    starts = np.empty((parts // 16, k), dtype=np.int64)  # 16: PARTITIONS_PER_GPSIMD_CORE
    for c in range(parts // 16):
        for j in range(k):
            s = idx[c * 16 + j % 16, j // 16]
            if s + n > size:
                bases[bases.size - 1] = 1
                return
            starts[c, j] = s
    x = gather_raw(row, SRC0, bases)
    out = np.empty((parts, k * n), dtype=np.int64)
    for p in range(parts):
        for j in range(k):
            for e in range(n):
                out[p, j * n + e] = x[p, starts[p // 16, j] + e]
    scatter_raw(row, DST, bases, out)


NONZERO_SRC_DTYPES = frozenset({DType.float32, DType.int32})


def _check_nonzero(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"index_offset", "padding_val"}))
    require_operands(ins, 1)
    src, dst = ins.srcs[0], ins.dst
    if src.dtype not in NONZERO_SRC_DTYPES:
        raise fail(ins, f"src is {src.dtype.name}; nonzero_with_count reads float32 or int32", DtypeError)
    if dst.dtype is not DType.int32:
        raise fail(ins, f"dst is {dst.dtype.name}; nonzero_with_count writes int32", DtypeError)
    require(src.partitions == dst.partitions, ins, f"src has {src.partitions} partitions but dst has "
            f"{dst.partitions}; they must match")
    require(dst.free_size == src.free_size + 1, ins, f"dst has {dst.free_size} elements per partition; "
            f"it must have src's {src.free_size} plus one for the count")
    for name in ("index_offset", "padding_val"):
        v = ins.imm.get(name, 0)
        require(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and INT32_MIN <= v <= INT32_MAX,
                ins, f"{name}={v!r} must be an int32")
    last = int(ins.imm.get("index_offset", 0)) + src.free_size - 1
    require(last <= INT32_MAX, ins, f"index_offset={ins.imm.get('index_offset', 0)} puts the last index at "
            f"{last}, beyond int32")


def _cycles_nonzero(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``GPSIMD_START + T + 1`` (the 8 cores in parallel, one element a cycle)."""
    return float(chip.gpsimd_start_cycles + ins.dst.free_size)


def _ref_nonzero(ins: Instruction, mem: RefMemory) -> None:
    src, dst = ins.srcs[0], ins.dst
    offset, pad = int(ins.imm.get("index_offset", 0)), int(ins.imm.get("padding_val", 0))
    x = mem.read(src)
    out = mem.read_int(dst) if ins.reads_dst() else np.empty((dst.partitions, dst.free_size), np.int64)
    for p in range(0, dst.partitions, PARTITIONS_PER_GPSIMD_CORE):
        found = np.flatnonzero(x[p] != 0)
        out[p, :] = pad
        out[p, :found.size] = found + offset
        out[p, -1] = found.size
    mem.write_int(dst, out)


def _touched_nonzero(ins: Instruction) -> list[tuple[AccessPattern, bool]]:
    """Only each GpSimd core's first partition of src and dst."""
    firsts = range(0, ins.dst.partitions, PARTITIONS_PER_GPSIMD_CORE)
    return ([(partition_rows(ins.srcs[0], p, 1), False) for p in firsts]
            + [(partition_rows(ins.dst, p, 1), True) for p in firsts])


def _encode_nonzero(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.imm.get("index_offset", 0)), int(ins.imm.get("padding_val", 0))], []


@njit(cache=True)
def _nb_nonzero(row, frow, bases):
    offset, pad = row[IMM], row[IMM + 1]
    x = gather_f32(row, SRC0, bases)
    parts, n = ap_parts(row, DST), ap_free(row, DST)
    out = gather_i64(row, DST, bases) if parts > 1 else np.empty((parts, n), dtype=np.int64)
    for p in range(0, parts, 16):  # PARTITIONS_PER_GPSIMD_CORE
        count = 0
        for i in range(n - 1):
            if x[p, i] != 0:
                out[p, count] = i + offset
                count += 1
        for i in range(count, n - 1):
            out[p, i] = pad
        out[p, n - 1] = count
    scatter_i64(row, DST, bases, out)


OPS = [OpDef(Opcode.NC_N_GATHER, _check_n_gather, _cycles_n_gather, _ref_n_gather, no_immediates,
             _nb_n_gather, index_out_of_range),
       OpDef(Opcode.LOCAL_GATHER, _check_local_gather, _cycles_local_gather, _ref_local_gather,
             _encode_local_gather, _nb_local_gather, local_gather_out_of_range),
       OpDef(Opcode.NONZERO_WITH_COUNT, _check_nonzero, _cycles_nonzero, _ref_nonzero, _encode_nonzero,
             _nb_nonzero, touched=_touched_nonzero)]
