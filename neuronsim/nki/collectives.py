"""``nki.collectives``: communication between the ranks of a collective launch (logical NeuronCores).

A collective launch runs one kernel on ``ranks`` logical cores, each with its own arguments and HBM
tensors (:func:`simulate`); each rank is a ``kernel[lnc]`` launch of its own on its own physical
cores. ``rank_id()`` is the rank; a ``ReplicaGroup`` lists the ranks that communicate, in disjoint
groups. Program ``p`` of an LNC=2 rank exchanges with program ``p`` of the others.

Each collective is a rendezvous, simulated as the collective-communication hardware moves the data,
by DMA: every rank copies its ``src`` into its slot of a staging tensor in HBM that all ranks see
(one ``DMA_COPY``), the ranks meet (a phase boundary: every rank's cores finish what came before,
and the next phase starts when the slowest rank is there), then each rank's DMAs copy what it
receives from the slots into its ``dst``. Reductions (``all_reduce``, ``reduce_scatter``,
``collective_permute_implicit_reduce``) run on the DMA engines' compute, ``nisa.dma_compute``
(float32 inside, ``nl.add``). Values are exact and the same on every rank (each sums the slots in
group order). Time: the DMAs at the chip's DMA rates, the wait for the slowest rank, and, for a
group spanning chips, the links' time from the chip file's ``[interconnect]`` table (``ranks.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from neuronsim.errors import ConstraintError, InputError, UnsupportedError
from neuronsim.nki import language as nl
from neuronsim.nki.isa.common import emit
from neuronsim.nki.isa.misc import VirtualRegister
from neuronsim.nki.language import NKIObject
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.sim.ir import Engine, Memory, Opcode


@dataclass
class ReplicaGroup(NKIObject):
    """The ranks that take part in a collective: a list of disjoint rank lists (``[[0, 1, 2, 3]]``)."""

    groups: list

    def __post_init__(self):
        groups = [list(g) for g in self.groups]
        seen: set[int] = set()
        for g in groups:
            if not g or any(not isinstance(r, int) or r < 0 for r in g) or seen & set(g) \
                    or len(set(g)) < len(g):
                raise InputError(f"ReplicaGroup({self.groups!r}): rank lists must be non-empty, "
                                 "of ranks >= 0, and must not overlap", location=caller_location())
            seen |= set(g)
        self.groups = groups


class RankRegister(VirtualRegister):
    """A register holding a rank id (``rank_id()``, the ring's current rank). Its value is known when
    the rank's kernel is traced, so ``.ap(scalar_offset=r, indirect_dim=d)`` on it is a view at
    that offset; as for any register, Python control flow on it is a TypeError."""

    def __init__(self, value: int):
        super().__init__(state=value)
        self.known_value = int(value)

    def __repr__(self) -> str:
        return f"<rank register = {self.known_value}>"


def rank_id(name=None) -> RankRegister:
    """This rank's id within the collective launch."""
    return RankRegister(current_trace().rank)


def _my_group(fn: str, replica_group) -> list[int]:
    trace = current_trace()
    groups = replica_group.groups if isinstance(replica_group, ReplicaGroup) else replica_group
    if not isinstance(groups, (list, tuple)):
        raise InputError(f"ncc.{fn}: replica_group must be a ReplicaGroup; "
                         f"got {type(replica_group).__name__}", location=caller_location())
    if not isinstance(replica_group, ReplicaGroup):
        groups = ReplicaGroup(list(groups)).groups
    for g in groups:
        if trace.rank in g:
            beyond = [r for r in g if r >= trace.world]
            if beyond:
                raise ConstraintError(
                    f"ncc.{fn}: replica group {g} has ranks {beyond}, but this launch has {trace.world} "
                    f"rank(s); launch the kernel on every rank with neuronsim.nki.collectives.simulate("
                    f"kernel, ranks=N)", location=caller_location())
            return list(g)
    raise ConstraintError(f"ncc.{fn}: rank {trace.rank} is in no group of {groups}",
                          location=caller_location())


def _tensors(fn: str, srcs, dsts, *, hbm_only: bool = False, coalesce_on_hbm: bool = True):
    srcs, dsts = list(srcs), list(dsts)
    if len(srcs) != len(dsts) or not srcs:
        raise InputError(f"ncc.{fn}: srcs and dsts must be lists of the same, non-zero length "
                         f"(got {len(srcs)} and {len(dsts)})", location=caller_location())
    memories = {v.buf.memory for v in (*srcs, *dsts) if isinstance(v, TensorView)}
    if any(not isinstance(v, TensorView) for v in (*srcs, *dsts)):
        raise InputError(f"ncc.{fn}: srcs and dsts must be kernel tensors", location=caller_location())
    if Memory.PSUM in memories or len(memories) > 1:
        raise ConstraintError(f"ncc.{fn}: tensors must all be in HBM or all in SBUF (got "
                              f"{sorted(m.name for m in memories)})", location=caller_location())
    if hbm_only and memories != {Memory.HBM}:
        raise ConstraintError(f"ncc.{fn}: tensors must be in HBM", location=caller_location())
    if len(srcs) > 1 and (memories != {Memory.HBM} or not coalesce_on_hbm):
        raise ConstraintError(f"ncc.{fn}: several tensors in one collective (coalesced) are supported "
                              f"on HBM only" if coalesce_on_hbm else f"ncc.{fn}: one tensor per list",
                              location=caller_location())
    for s, d in zip(srcs, dsts, strict=True):
        if s.dtype != d.dtype:
            raise ConstraintError(f"ncc.{fn}: src {s!r} and dst {d!r} have different dtypes",
                                  location=caller_location())
    return srcs, dsts


def _dma(fn: str, dst: TensorView, src: TensorView) -> None:
    emit(f"ncc.{fn}", Opcode.DMA_COPY, Engine.DMA, dst, (src,), {}, queue=current_trace().next_dma_queue())


def _exchange(fn: str, group: list[int], srcs: list[TensorView]) -> list[list[TensorView]]:
    """Copy each ``src`` into this rank's slot of a new staging tensor, meet the other ranks, and
    return, per src, the slots of the group's ranks (in group order) as views shaped like it."""
    trace = current_trace()
    location = caller_location()
    instances = math.prod(trace.grid)
    me = trace.program_id[0] if trace.program_id else 0
    slots = []
    for src in srcs:
        k = len(trace.collectives)
        name = f"ccom{k}"
        staging = trace.new_buffer(name, Memory.HBM, (trace.world, instances, *src.shape),
                                   src.buf.dtype, location, shared=True)
        # (kind, group, staging tensor, line, the phase it ends, bytes each rank sends)
        trace.collectives.append((fn, tuple(group), staging.name, location, len(trace.barriers),
                                  math.prod(src.shape) * src.buf.dtype.itemsize))
        whole = TensorView.whole(staging)
        _dma(fn, whole[trace.rank, me], src)
        slots.append([whole[r, me] for r in group])
    trace.barriers.append(len(trace.records))  # the rendezvous: a phase boundary on every rank
    return slots


def _chunks(view: TensorView, dim: int, n: int, fn: str) -> list[TensorView]:
    size = view.shape[dim]
    if size % n:
        raise ConstraintError(f"ncc.{fn}: dim {dim} of {view!r} ({size}) does not split into "
                              f"{n} ranks' chunks", location=caller_location())
    step = size // n
    return [view[tuple(slice(j * step, (j + 1) * step) if d == dim else slice(None)
                       for d in range(len(view.shape)))] for j in range(n)]


def _same_elements(fn: str, dst: TensorView, src: TensorView, what: str) -> None:
    if math.prod(dst.shape) != math.prod(src.shape):
        raise ConstraintError(f"ncc.{fn}: {what}: {dst!r} and {src!r} differ in size",
                              location=caller_location())


def _reduce(fn: str, dst: TensorView, parts: list[TensorView], op) -> None:
    """dst = parts[0] + parts[1] + ... on the DMA engines (``nisa.dma_compute``)."""
    from neuronsim.nki import isa

    if op is not nl.add and getattr(op, "__name__", None) != "add":
        raise UnsupportedError(f"ncc.{fn}: op={getattr(op, '__name__', op)}: reductions run on the DMA "
                               f"engines' compute, which adds only (nisa.dma_compute, S16)",
                               location=caller_location())
    if (isa.dma_compute.__doc__ or "").startswith("Not simulated"):
        raise UnsupportedError(f"ncc.{fn}: reductions run on the DMA engines' compute (nisa.dma_compute), "
                               f"which is not simulated yet", location=caller_location())
    isa.dma_compute(dst, parts, nl.add)


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """Each rank's ``dst`` is the group's ``src`` tensors concatenated along ``collective_dim``."""
    fn = "all_gather"
    srcs, dsts = _tensors(fn, srcs, dsts)
    group = _my_group(fn, replica_group)
    on_sbuf = srcs[0].buf.memory is Memory.SBUF
    if collective_dim not in ((0, 1) if on_sbuf else (0,)):
        raise ConstraintError(f"ncc.{fn}: collective_dim={collective_dim}; HBM collectives gather "
                              f"along dim 0, SBUF ones along 0 or 1", location=caller_location())
    for parts, dst, src in zip(_exchange(fn, group, srcs), dsts, srcs, strict=True):
        for chunk, part in zip(_chunks(dst, collective_dim, len(group), fn), parts, strict=True):
            _same_elements(fn, chunk, src, "each rank's share of dst and src")
            _dma(fn, chunk, part)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    """Each rank's ``dst`` is the element-wise ``op`` over the group's ``src`` tensors."""
    fn = "all_reduce"
    srcs, dsts = _tensors(fn, srcs, dsts)
    group = _my_group(fn, replica_group)
    for parts, dst, src in zip(_exchange(fn, group, srcs), dsts, srcs, strict=True):
        _same_elements(fn, dst, src, "dst and src")
        _reduce(fn, dst, parts, op)


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    """Rank ``i`` of the group gets chunk ``i`` (along ``collective_dim``) of the reduction."""
    fn = "reduce_scatter"
    srcs, dsts = _tensors(fn, srcs, dsts)
    group = _my_group(fn, replica_group)
    if collective_dim != 0:
        raise ConstraintError(f"ncc.{fn}: collective_dim={collective_dim}; only 0 is supported",
                              location=caller_location())
    mine = group.index(current_trace().rank)
    for parts, dst in zip(_exchange(fn, group, srcs), dsts, strict=True):
        pieces = [_chunks(p, 0, len(group), fn)[mine] for p in parts]
        _same_elements(fn, dst, pieces[0], "dst and one rank's chunk of src")
        _reduce(fn, dst, pieces, op)


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """Chunk ``j`` of rank ``i``'s ``src`` becomes chunk ``i`` of rank ``j``'s ``dst`` (HBM only)."""
    fn = "all_to_all"
    srcs, dsts = _tensors(fn, srcs, dsts, hbm_only=True)
    group = _my_group(fn, replica_group)
    if collective_dim != 0:
        raise ConstraintError(f"ncc.{fn}: collective_dim={collective_dim}; only 0 is supported",
                              location=caller_location())
    mine = group.index(current_trace().rank)
    for parts, dst in zip(_exchange(fn, group, srcs), dsts, strict=True):
        for chunk, part in zip(_chunks(dst, 0, len(group), fn), parts, strict=True):
            piece = _chunks(part, 0, len(group), fn)[mine]
            _same_elements(fn, chunk, piece, "chunks of dst and src")
            _dma(fn, chunk, piece)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """For each ``(source, target)`` pair, ``target``'s ``dst`` receives ``source``'s ``src`` (HBM)."""
    fn = "collective_permute"
    srcs, dsts = _tensors(fn, srcs, dsts, hbm_only=True, coalesce_on_hbm=False)
    trace = current_trace()
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    ranks = sorted({r for p in pairs for r in p})
    if any(r >= trace.world for r in ranks) or len({t for _, t in pairs}) < len(pairs):
        raise ConstraintError(f"ncc.{fn}: source_target_pairs {pairs}: ranks must be < {trace.world} and "
                              f"each target must receive once", location=caller_location())
    parts = _exchange(fn, list(range(trace.world)), srcs)[0]
    for s, t in pairs:
        if t == trace.rank:
            _same_elements(fn, dsts[0], srcs[0], "dst and src")
            _dma(fn, dsts[0], parts[s])


def _ring(fn: str, replica_group, by_channel: list, channel_ids) -> tuple[list[int], int]:
    group = _my_group(fn, replica_group)
    if list(channel_ids) != list(range(len(channel_ids))) or len(by_channel) != len(channel_ids):
        raise ConstraintError(f"ncc.{fn}: channel_ids {list(channel_ids)} must be 0, 1, ... with one tensor "
                              f"list per channel", location=caller_location())
    return group, group.index(current_trace().rank)


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,),
                                priority=None, name=None) -> None:
    """A ring step: each rank's ``src`` goes to its successor in the group; ``dst`` receives the
    predecessor's."""
    fn = "collective_permute_implicit"
    group, mine = _ring(fn, replica_group, srcs_by_channel, channel_ids)
    pred = (mine - 1) % len(group)
    for srcs, dsts in zip(srcs_by_channel, dsts_by_channel, strict=True):
        srcs, dsts = _tensors(fn, srcs, dsts, coalesce_on_hbm=False)
        parts = _exchange(fn, group, srcs)[0]
        _same_elements(fn, dsts[0], srcs[0], "dst and src")
        _dma(fn, dsts[0], parts[pred])


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group,
                                       op, channel_ids=(0,), priority=None, name=None) -> None:
    """A ring step sending ``op(srcs0, srcs1)``: ``dst`` receives the predecessor's reduced tensor."""
    fn = "collective_permute_implicit_reduce"
    group, mine = _ring(fn, replica_group, srcs0_by_channel, channel_ids)
    pred = (mine - 1) % len(group)
    for s0, s1, dsts in zip(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, strict=True):
        s0, dsts = _tensors(fn, s0, dsts, coalesce_on_hbm=False)
        s1, _ = _tensors(fn, s1, dsts, coalesce_on_hbm=False)
        trace = current_trace()
        sent = TensorView.whole(trace.new_buffer(f"ccom_send{len(trace.collectives)}", Memory.HBM,
                                                 s0[0].shape, s0[0].buf.dtype, caller_location()))
        _reduce(fn, sent, [s0[0], s1[0]], op)
        parts = _exchange(fn, group, [sent])[0]
        _same_elements(fn, dsts[0], s0[0], "dst and src")
        _dma(fn, dsts[0], parts[pred])


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0,
                                                           name=None) -> RankRegister:
    """The rank whose data a ring step ``iteration_id`` processes: this rank at step 0, then its
    predecessors in the group, one per step."""
    group = _my_group("collective_permute_implicit_current_processing_rank_id", replica_group)
    mine = group.index(current_trace().rank)
    return RankRegister(group[(mine - int(iteration_id)) % len(group)])


def _unsupported(fn: str):
    def call(*args, **kwargs):
        raise UnsupportedError(f"ncc.{fn} is not simulated by neuronsim (its metadata-driven sizes are "
                               f"run-time values)", instruction=f"ncc.{fn}", location=caller_location())

    call.__name__ = fn
    call.__doc__ = f"Not simulated: raises UnsupportedError (``ncc.{fn}``)."
    return call


all_gather_v = _unsupported("all_gather_v")
all_to_all_v = _unsupported("all_to_all_v")
