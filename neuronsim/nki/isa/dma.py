"""DMA: ``dma_copy``, ``dma_transpose`` and ``dma_compute``."""

from __future__ import annotations

import itertools

from neuronsim.errors import EngineAccessError, UnsupportedError
from neuronsim.nki.isa.common import (
    _describe,
    _fail,
    _tile,
    alu_op,
    emit,
)
from neuronsim.nki.isa.enums import (
    dge_mode,
    engine,
    oob_mode,
)
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import current_trace
from neuronsim.sim.ir import AluOp, Engine, Memory, Opcode

_UNKNOWN_DGE, _UNKNOWN = dge_mode.unknown, engine.unknown


def _check_dma(fn: str, dst: TensorView, src: TensorView) -> None:
    psum = Memory.PSUM
    if dst.buf.memory is not psum and src.buf.memory is not psum and dst.size == src.size:
        return
    for role, v in (("dst", dst), ("src", src)):
        if v.buf.memory is psum:
            raise _fail(
                fn,
                f"DMA engines cannot access PSUM; {role} is {_describe(v)} (copy it to SBUF with "
                f"nisa.tensor_copy first)",
                EngineAccessError,
            )
    raise _fail(
        fn,
        f"src {_describe(src)} has {src.size} elements but dst {_describe(dst)} has {dst.size}; "
        f"element counts must match",
    )


_TRIGGER_ENGINES = {engine.sync: Engine.SYNC, engine.scalar: Engine.SCALAR, engine.gpsimd: Engine.GPSIMD}


def _descriptor_imm(fn: str, mode, trigger) -> dict:
    """The IR immediates saying who generates the descriptors and which engine triggers the DMA
    (S18: hwdge from the Scalar or Sync engine, ~600 ns; swdge on GpSimd; none/unknown: prebuilt)."""
    mode = dge_mode(mode) if not isinstance(mode, dge_mode) else mode
    trigger = engine(trigger) if not isinstance(trigger, engine) else trigger
    if mode is dge_mode.unknown and trigger in (engine.scalar, engine.sync):
        mode = dge_mode.hwdge  # only hardware DGE takes a trigger engine (S14)
    allowed = {dge_mode.hwdge: (engine.scalar, engine.sync), dge_mode.swdge: (engine.gpsimd,)}.get(mode, ())
    if trigger is not engine.unknown and trigger not in allowed:
        raise _fail(fn, f"engine={trigger.name} cannot trigger a {mode.name} DMA (dge_mode={mode.name}); "
                        f"allowed: {', '.join(e.name for e in allowed) or 'leave engine unset'}")
    imm = {} if mode is dge_mode.unknown else {"dge": mode.name}
    if trigger is not engine.unknown:
        imm["trigger"] = _TRIGGER_ENGINES[trigger]
    return imm


def dma_copy(
    dst,
    src,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
):
    """Copy ``src`` to ``dst`` (HBM/SBUF <-> HBM/SBUF) on the DMA engines (casts through fp32).

    ``dge_mode`` / ``engine`` choose who generates the descriptors and triggers the transfer:
    hardware DGE costs ~600 ns on the Scalar or Sync engine that triggers it (S18)."""
    fn = "dma_copy"
    if not isinstance(dst, TensorView) or not isinstance(src, TensorView):
        dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    _check_dma(fn, dst, src)
    if dst.indirect is not None or src.indirect is not None:
        _indirect_copy(fn, dst, src, oob_mode, dge_mode, name)
        return
    imm = {} if dge_mode is _UNKNOWN_DGE and engine is _UNKNOWN else _descriptor_imm(fn, dge_mode, engine)
    emit(fn, Opcode.DMA_COPY, Engine.DMA, dst, (src,), imm, name=name, queue=current_trace().next_dma_queue())



def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None):
    """``dst = srcs[0] + srcs[1] + ...`` in fp32 inside the DMA engines (S16: ``nl.add`` with scales of 1
    only; up to 16 sources of dst's element count, HBM or SBUF). More than 4 sources are chained through
    dst (its dtype rounds the partial sums: exact for fp32). Read-modify-write through a
    ``vector_offset`` source is not simulated."""
    fn = "dma_compute"
    dst = _tile(dst, "dst", fn)
    srcs = [_tile(s, f"srcs[{k}]", fn) for k, s in enumerate(srcs)]
    if not 1 <= len(srcs) <= 16:
        raise _fail(fn, f"takes 1 to 16 sources; got {len(srcs)}")
    if alu_op(reduce_op, "reduce_op") is not AluOp.add:
        raise _fail(fn, f"reduce_op={reduce_op}; dma_compute supports nl.add only")
    if scales is not None and (len(scales) != len(srcs) or any(float(x) != 1.0 for x in scales)):
        raise _fail(fn, f"scales={list(scales)}; dma_compute supports scales of 1.0 only, one per source")
    for v in (dst, *srcs):
        if v.indirect is not None:
            raise _fail(fn, f"{_describe(v)} is an indirect view: dma_compute's read-modify-write through "
                        "vector_offset is not simulated", UnsupportedError)
    for src in srcs:
        _check_dma(fn, dst, src)
    queue = current_trace().next_dma_queue()
    group, rest = srcs[:4], srcs[4:]
    while group:
        emit(fn, Opcode.DMA_COMPUTE, Engine.DMA, dst, tuple(group), {}, name=name, queue=queue,
             roles=tuple(f"srcs[{k}]" for k in range(len(group))))
        group, rest = ([dst, *rest[:3]], rest[3:]) if rest else ([], [])


def _indirect_copy(fn: str, dst: TensorView, src: TensorView, oob, dge, name) -> None:
    """A gather (indirect src) or scatter (indirect dst): one DMA_COPY_INDIRECT
    (``sim/engines/dma_indirect.py``)."""
    if dst.indirect is not None and src.indirect is not None:
        raise _fail(fn, "both src and dst are indirect views; one side at most", UnsupportedError)
    role, view = ("dst", dst) if dst.indirect is not None else ("src", src)
    ind = view.indirect
    if ind.vector and dge not in (dge_mode.unknown, dge_mode.swdge, None):
        raise _fail(fn, f"a vector_offset access needs dge_mode=swdge (or unknown); got {dge} (S18)")
    plain = type(view)(view.buf, view.offset, view.dims, view.ppair)
    if ind.vector:  # the partition step comes from the offsets at run time
        plain = type(view)(view.buf, view.offset, ((0, view.dims[0][1]),) + view.dims[1:])
    if role == "dst":
        dst = plain
    else:
        src = plain
    imm = {"indexed": role, "vector": ind.vector, "stride": ind.stride,
           "oob_skip": oob in (oob_mode.skip, "skip", 1), "dge": "swdge" if ind.vector else "hwdge"}
    emit(fn, Opcode.DMA_COPY_INDIRECT, Engine.DMA, dst, (src, ind.offsets), imm, name=name,
         queue=current_trace().next_dma_queue(), roles=("src", "offsets"))


def dma_transpose(
    dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error, name=None
):
    """Transpose ``src`` (HBM or SBUF) into ``dst`` in SBUF with the DMA engines: [A, B] -> [B, A]; a
    3-d or 4-d tile permutes by (2, 1, 0) / (3, 1, 2, 0) (S16), which keeps the middle dims in place:
    it is the 2-D transpose of the first and last dims for each middle index, recorded as one
    DMA_TRANSPOSE per middle index (attention_tkg's [s, 1, 1, d] views, attention_cte's [s, 1, 4, d])."""
    fn = "dma_transpose"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if len(src.shape) > 2:
        pairs = _two_d_transposes(fn, dst, src, axes)
    elif axes not in (None, (1, 0), [1, 0]):
        raise _fail(fn, f"axes={axes} is not the permutation of a 2-d tile, (1, 0)", UnsupportedError)
    else:
        pairs = [(dst, src)]
    for d, s in pairs:
        _check_dma(fn, d, s)
        if d.memory is not Memory.SBUF:
            raise _fail(fn, f"dst must be in SBUF; got {_describe(d)}", EngineAccessError)
        emit(fn, Opcode.DMA_TRANSPOSE, Engine.DMA, d, (s,), _descriptor_imm(fn, dge_mode, engine.unknown),
             name=name, queue=current_trace().next_dma_queue())


_PERMUTATION = {3: (2, 1, 0), 4: (3, 1, 2, 0)}  # dma_transpose's axes by rank (S16)
_MAX_MIDDLE = 128  # 2-D transposes one call may expand to (a bound on trace size, not hardware's)


def _two_d_transposes(fn: str, dst: TensorView, src: TensorView,
                      axes) -> list[tuple[TensorView, TensorView]]:
    """(dst, src) 2-D views of a 3-d/4-d dma_transpose, one pair per index of the middle dims."""
    perm = _PERMUTATION.get(len(src.shape))
    if perm is None or (axes is not None and tuple(axes) != perm):
        raise _fail(fn, f"axes={axes} for a {len(src.shape)}-d src: dma_transpose permutes by (1, 0), "
                    "(2, 1, 0) or (3, 1, 2, 0)", UnsupportedError)
    want = tuple(src.shape[a] for a in perm)
    if tuple(dst.shape) != want:
        raise _fail(fn, f"dst is {list(dst.shape)} but src {list(src.shape)} permuted by {perm} is "
                    f"{list(want)}")
    middle = list(itertools.product(*(range(n) for n in src.shape[1:-1])))
    if len(middle) > _MAX_MIDDLE or src.ppair is not None or dst.ppair is not None:
        raise _fail(fn, f"a {len(src.shape)}-d transpose of src {list(src.shape)} with more than "
                    f"{_MAX_MIDDLE} middle indices is not simulated", UnsupportedError)
    pairs = []
    for index in middle:
        d_off = dst.offset + sum(i * step for i, (step, _) in zip(index, dst.dims[1:-1], strict=True))
        s_off = src.offset + sum(i * step for i, (step, _) in zip(index, src.dims[1:-1], strict=True))
        pairs.append((type(dst)(dst.buf, d_off, (dst.dims[0], dst.dims[-1])),
                      type(src)(src.buf, s_off, (src.dims[0], src.dims[-1]))))
    return pairs
