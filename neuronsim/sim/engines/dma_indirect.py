"""DMA with a runtime offset: ``dma_copy`` whose src or dst ``.ap()`` has ``scalar_offset`` or
``vector_offset`` (S17 nki-aps "Dynamic Access", S16 ``dma_copy`` "Indirect addressing", S18).

One side of the copy (``imm["indexed"]``: ``"src"`` gathers, ``"dst"`` scatters) is an HBM access
pattern whose start moves by an index read from SBUF when the instruction runs (``srcs[1]``):

- scalar (``vector=False``): one index ``v`` (a [1, 1] tile); the whole access starts
  ``v * stride`` elements further, ``stride`` = the product of the indexed tensor's dims after
  ``indirect_dim`` (read from the base tensor, not from the pattern).
- vector (``vector=True``, ``indirect_dim=0``): one index per partition (a [P, 1] tile); partition
  ``p`` of the indexed side starts ``offsets[p] * stride`` elements further. The indexed pattern's
  partition step is 0 in the IR (the ``.ap()`` step is ignored, as the docs say); the other side has
  the same P partitions and elements per partition.

Out-of-bounds indices (the access would leave the indexed tensor) raise ``OutOfBoundsError`` with
the kernel line (``oob_mode.error``, the default) before anything is written, or are skipped
(``oob_skip``: a scalar index skips the copy, a vector index skips its partition). Duplicate
scatter indices: partitions are written in order, the last one wins.

Cost: the transfer as ``dma_copy`` (``dma.py``); its descriptors are made at run time, so the
instruction carries ``dge``: ``swdge`` (GpSimd) for a vector offset, ``hwdge`` for a scalar one
(S18), whose trigger cost ``dma.trigger`` charges. The schedule cannot know which bytes an indirect
side touches, so it orders the instruction against the whole indexed tensor (``schedule.py``), as
the compiler must; the time itself does not depend on the index values, so it is computed once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError, OutOfBoundsError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import OpDef, fail, require, require_operands
from neuronsim.sim.engines.dma import _nb_copy
from neuronsim.sim.ir import AccessPattern, Instruction, Memory, Opcode
from neuronsim.sim.memory.access import F_DTYPE, F_PARTS, F_PITCH, F_START, ITEMSIZE, gather_i64
from neuronsim.sim.memory.reference import RefMemory

INDEX_DTYPES = frozenset({DType.int32, DType.uint32, DType.int16, DType.uint16})


def indexed_side(ins: Instruction) -> AccessPattern:
    return ins.dst if ins.imm["indexed"] == "dst" else ins.srcs[0]


def other_side(ins: Instruction) -> AccessPattern:
    return ins.srcs[0] if ins.imm["indexed"] == "dst" else ins.dst


def _reach(ap: AccessPattern) -> tuple[int, int]:
    """First and last element the indexed AP touches at index 0 (partition reach included)."""
    lo = hi = 0
    for step, num in ap.pattern:
        lo += min(0, step * (num - 1))
        hi += max(0, step * (num - 1))
    return ap.offset + lo, ap.offset + hi


def out_of_bounds(ins: Instruction) -> OutOfBoundsError:
    """The one message both executors give for an index that leaves the indexed tensor."""
    side = indexed_side(ins)
    first, last = _reach(side)
    stride = ins.imm["stride"]
    n = side.tensor.num_elements
    lo = -(first // stride)
    hi = (n - 1 - last) // stride
    return fail(ins, f"an index in {ins.srcs[1].describe()} is outside {lo}..{hi}, the indices that keep "
                f"the {ins.imm['indexed']} access {side.describe()} inside {side.tensor.describe()} "
                f"(oob_mode=error; oob_mode.skip skips such indices)", OutOfBoundsError)


def _check(ins: Instruction, chip: ChipSpec) -> None:
    require_operands(ins, 2)
    side, other, offsets = indexed_side(ins), other_side(ins), ins.srcs[1]
    require(ins.imm["indexed"] in ("src", "dst"), ins, f"indexed={ins.imm['indexed']!r}; 'src' or 'dst'")
    require(side.memory is Memory.HBM, ins,
            f"the indexed side {side.describe()} must be in HBM (S16: the tensor .ap() is called on)")
    require(offsets.memory is Memory.SBUF, ins, f"the offsets {offsets.describe()} must be in SBUF")
    if offsets.dtype not in INDEX_DTYPES:
        raise fail(ins, f"offsets dtype {offsets.dtype.name} is not an index dtype; use int32 or uint32",
                   DtypeError)
    require(ins.imm["stride"] >= 1, ins, f"indirect stride {ins.imm['stride']} must be >= 1")
    require(side.num_elements == other.num_elements, ins,
            f"copies {ins.srcs[0].num_elements} elements into {ins.dst.num_elements}; counts must match")
    if ins.imm["vector"]:
        p = side.partitions
        require(side.pattern[0][0] == 0, ins, "a vector-indexed pattern has partition step 0 in the IR")
        require(offsets.partitions == p and offsets.free_size == 1, ins,
                f"vector_offset {offsets.describe()} must be [{p}, 1]: one index per partition of "
                f"{side.describe()}")
        require(other.partitions == p and other.free_size == side.free_size, ins,
                f"the other side {other.describe()} must have {p} partitions of {side.free_size} "
                f"elements, like the indexed side {side.describe()}")
    else:
        require(offsets.num_elements == 1, ins, f"scalar_offset {offsets.describe()} must be one element")


def _no_cycles(ins: Instruction, chip: ChipSpec) -> float:
    return 0.0  # DMA time: charged by the scheduler (dma.py)


def _moved(ap: AccessPattern, extra: int, partition: int | None = None) -> AccessPattern:
    """``ap`` started ``extra`` elements further; with ``partition``, that one partition alone."""
    if partition is None:
        return AccessPattern(ap.tensor, ap.offset + extra, ap.pattern)
    step = ap.pattern[0][0]
    return AccessPattern(ap.tensor, ap.offset + extra + partition * step, ((step, 1),) + ap.pattern[1:])


def _ref(ins: Instruction, mem: RefMemory) -> None:
    side = indexed_side(ins)
    stride, skip = ins.imm["stride"], ins.imm["oob_skip"]
    first, last = _reach(side)
    n = side.tensor.num_elements
    idx = mem.read_int(ins.srcs[1]).reshape(-1)
    ok = (first + idx * stride >= 0) & (last + idx * stride < n)
    if not ok.all() and not skip:
        raise out_of_bounds(ins)
    to_dst = ins.imm["indexed"] == "dst"
    if ins.imm["vector"]:
        pairs = [(_moved(side, int(v) * stride, p), _moved(other_side(ins), 0, p))
                 for p, v in enumerate(idx) if ok[p]]
    else:
        pairs = [(_moved(side, int(idx[0]) * stride), other_side(ins))] if ok[0] else []
    for moved, other in pairs:
        dst, src = (moved, other) if to_dst else (other, moved)
        if dst.dtype == src.dtype:
            mem.copy(dst, src)
        else:
            mem.write(dst, mem.read(src).reshape(dst.partitions, dst.free_size))


def _encode(ins: Instruction) -> tuple[list[int], list[float]]:
    first, last = _reach(indexed_side(ins))
    return [int(ins.imm["indexed"] == "dst"), int(bool(ins.imm["vector"])), int(ins.imm["stride"]),
            int(bool(ins.imm["oob_skip"])), first, last, indexed_side(ins).tensor.num_elements], []


@njit(cache=True)
def _nb_indirect(row, frow, bases):
    """Sets the executor's status slot (``bases[-1]``) when an index is out of bounds under
    oob_mode=error, writing nothing."""
    to_dst = row[IMM] == 1
    side = DST if to_dst else SRC0
    other = SRC0 if to_dst else DST
    vector, stride, skip = row[IMM + 1] == 1, row[IMM + 2], row[IMM + 3] == 1
    first, last, n = row[IMM + 4], row[IMM + 5], row[IMM + 6]
    idx = gather_i64(row, SRC1, bases).reshape(-1)
    count = idx.size if vector else 1
    ok = np.empty(count, np.bool_)
    for k in range(count):
        ok[k] = first + idx[k] * stride >= 0 and last + idx[k] * stride < n
        if not ok[k] and not skip:
            bases[bases.size - 1] = 1
            return
    item = ITEMSIZE[row[side + F_DTYPE]]
    moved = row.copy()
    if not vector:
        if ok[0]:
            moved[side + F_START] = row[side + F_START] + idx[0] * stride * item
            _nb_copy(moved, frow, bases)
        return
    moved[side + F_PARTS] = 1
    moved[other + F_PARTS] = 1
    for p in range(count):
        if ok[p]:
            moved[side + F_START] = row[side + F_START] + idx[p] * stride * item
            moved[other + F_START] = row[other + F_START] + p * row[other + F_PITCH]
            _nb_copy(moved, frow, bases)


OPS = [OpDef(Opcode.DMA_COPY_INDIRECT, _check, _no_cycles, _ref, _encode, _nb_indirect, out_of_bounds)]
