"""When a kernel's PSUM tiles, held from first to last use, exceed PSUM's 8 banks: evict to SBUF.

PSUM is TensorE's landing buffer: a matmul must write it, and only TensorE accumulates into it;
every other engine that reads PSUM (VectorE, ScalarE) reads SBUF as well (S9). A PSUM tile whose
accumulation is finished (no TensorE instruction writes it any more) can therefore live on in SBUF:
the Neuron compiler allocates a kernel's tiles itself after tracing it (``nki.compiler.Allocation``
docs: COLORING, "the compiler allocates the tiles with graph coloring after it traces the kernel"),
and AWS's attention tutorial kernel ``attn_fwd_v3`` relies on room being made so (its 256 one-bank
``qk`` blocks are all written before the first is read; PSUM has 8 banks, S9). That the compiler
moves finished tiles to SBUF is our reading, not a published rule, and how it chooses is not
published either; this pass does the classic thing, in program
order, like ``spill.py`` for SBUF:

- A PSUM tile takes its banks at its first use and gives them back after its last.
- When a tile needs banks that are not free, the resident tile whose next use is farthest away
  leaves PSUM, if it can: its accumulation is finished, and the instruction needing room does not
  use it. Just before that instruction, a VectorE ``tensor_copy`` (bit exact; which engine the
  compiler uses is not published: assumed) moves it to a new SBUF tile of its shape and dtype, and
  every later instruction uses that SBUF tile instead. SBUF's own allocation (and spilling to HBM,
  ``spill.py``) then places the copies.
- A tile still to be written by TensorE (an open accumulation group, or a later matmul into it)
  cannot leave: when no resident tile can, the kernel really does not fit, and the capacity error
  stands (PsumCapacityError, naming the tiles held).

Tiles with aliases (reshaped views) or kernel-pinned addresses never leave, and a kernel with
register-driven loops is not rewritten (its records' positions are its branch targets).
"""

from __future__ import annotations

from neuronsim.nki.buffer import Buffer
from neuronsim.nki.control_flow import extend_liveness, loop_spans
from neuronsim.nki.spill import SpillFailure, _free, _on, _rounded, _views
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import Trace
from neuronsim.sim.ir import Engine, Memory, Opcode

_NEVER = 1 << 62


class _PsumTile:
    __slots__ = ("buf", "uses", "tensor_writes", "next", "addr", "size", "moved", "placed")

    def __init__(self, buf: Buffer, unit: int):
        self.buf = buf
        self.uses: list[int] = []
        self.tensor_writes: list[int] = []  # records where TensorE writes it
        self.next = 0
        self.addr = -1
        self.size = _rounded(buf.bytes_per_partition, unit)
        self.moved: Buffer | None = None  # its SBUF copy once evicted
        self.placed = False

    def next_use_after(self, t: int) -> int:
        while self.next < len(self.uses) and self.uses[self.next] <= t:
            self.next += 1
        return self.uses[self.next] if self.next < len(self.uses) else _NEVER

    def finished_at(self, t: int) -> bool:
        """No TensorE write at or after record ``t``: its accumulation is done."""
        return not self.tensor_writes or self.tensor_writes[-1] < t


def evict_to_sbuf(trace: Trace, bufs: list[Buffer], unit: int, capacity: int) -> int:
    """Rewrite ``trace`` so its PSUM tiles fit, setting every PSUM buffer's address; return how many
    tiles moved to SBUF. Raises :class:`SpillFailure` when a tile needs banks no tile can give up."""
    if loop_spans(trace.records):
        raise SpillFailure(bufs[0], 0, [])
    roots = {b.id for b in bufs}
    aliased = {b.alias_of.id for b in trace.buffers if b.alias_of is not None}
    tiles = {b.id: _PsumTile(b, unit) for b in bufs}
    for t, rec in enumerate(trace.records):
        for v in _views(rec):
            tile = tiles.get(v.buf.root().id)
            if tile is not None and (not tile.uses or tile.uses[-1] != t):
                tile.uses.append(t)
        dst = rec[2]
        if rec[1] is Engine.TENSOR and dst is not None and dst.buf.root().id in roots:
            tiles[dst.buf.root().id].tensor_writes.append(t)
    movable = {i for i, tile in tiles.items() if i not in aliased and not tile.buf.pinned}

    gaps: list[list[int]] = [[0, capacity, -1]]
    resident: dict[int, _PsumTile] = {}
    records, new_index, moved = [], [], 0

    def place(tile: _PsumTile, t: int, used: set[int], location) -> None:
        nonlocal moved
        while True:
            for i, gap in enumerate(gaps):
                if gap[1] - gap[0] >= tile.size:
                    tile.addr = gap[0]
                    if gap[1] - gap[0] == tile.size:
                        del gaps[i]
                    else:
                        gap[0] += tile.size
                    resident[tile.buf.id] = tile
                    tile.buf.address = (0, tile.addr)
                    tile.placed = True
                    return
            victims = [v for v in resident.values() if v.buf.id not in used and v.buf.id in movable
                       and v.finished_at(t)]
            if not victims:
                live = sorted((v.addr, v.size, v.buf) for v in resident.values())
                raise SpillFailure(tile.buf, tile.size, live)
            victim = max(victims, key=lambda v: (v.next_use_after(t), v.buf.id))
            old = victim.buf
            copy = trace.new_buffer(f"{old.name}.sbuf", Memory.SBUF, old.shape, old.dtype, old.location,
                                    register=False)
            copy.written = True
            evict = (TensorView.whole(copy), (TensorView.whole(old),))
            name = f"evict {old.name}"
            records.append((Opcode.TENSOR_COPY, Engine.VECTOR, *evict, {}, location, name, 0, None))
            victim.moved = copy
            moved += 1
            leave(victim, t)

    def leave(tile: _PsumTile, t: int) -> None:
        del resident[tile.buf.id]
        _free(gaps, tile.addr, tile.addr + tile.size, t)

    for t, rec in enumerate(trace.records):
        used = {v.buf.root().id for v in _views(rec)} & roots
        new_index.append(len(records))
        for i in sorted(used):
            tile = tiles[i]
            if not tile.placed:
                place(tile, t, used, rec[5])
        records.append(_moved(rec, tiles, roots))
        for i in used:
            tile = tiles[i]
            if tile.moved is None and tile.next_use_after(t) == _NEVER:
                leave(tile, t)
    if not moved:
        return 0
    trace.records[:] = records
    trace.barriers[:] = [new_index[b] if b < len(new_index) else len(records) for b in trace.barriers]
    _recompute_liveness(trace)
    return moved


def _moved(rec, tiles: dict[int, _PsumTile], roots: set[int]):
    """``rec`` with its views of evicted PSUM tiles moved onto their SBUF copies."""
    def move(v):
        if v is None or v.buf.id not in roots or tiles[v.buf.id].moved is None:
            return v
        return _on(tiles[v.buf.id].moved, v)

    opcode, engine, dst, srcs, imm, loc, name, queue, dst2 = rec
    return (opcode, engine, move(dst), tuple(move(v) for v in srcs), imm, loc, name, queue, move(dst2))


def _recompute_liveness(trace: Trace) -> None:
    """Every on-chip buffer's first and last record, after records were inserted."""
    for b in trace.buffers:
        if b.memory is not Memory.HBM:
            b.first = b.last = -1
    for t, rec in enumerate(trace.records):
        for v in _views(rec):
            root = v.buf.root()
            if root.memory is Memory.HBM:
                continue
            if root.first < 0:
                root.first = t
            root.last = t
    extend_liveness(trace)
