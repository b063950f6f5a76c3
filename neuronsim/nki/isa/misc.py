"""Multi-core synchronization and the target version."""

from __future__ import annotations

from neuronsim.errors import DtypeError, EngineAccessError, UnsupportedError
from neuronsim.nki.isa.common import (
    _describe,
    _fail,
    _tile,
    emit,
)
from neuronsim.nki.isa.enums import (
    dma_engine,
    engine,
    nc_version,
)
from neuronsim.nki.isa.registers import VirtualRegister, barrier, in_dynamic_loop  # noqa: F401 (collectives)
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.sim.ir import Engine, Memory, Opcode


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Synchronize the cores of an LNC=2 launch: every core finishes what came before before any goes on."""
    if tuple(cores) != (0, 1):
        raise _fail("core_barrier", f"cores={cores}; only (0, 1) is supported")
    barrier("core_barrier")


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None):
    """Exchange SBUF tiles between the two cores of an LNC=2 launch: this core's ``src`` goes to
    ``dst`` on ``send_to_rank`` while ``dst`` here receives ``recv_from_rank``'s ``src`` (S16).

    Simulated as the cores do it with ``dma_engine.dma`` (DMA with CoreBarrier synchronization):
    each core DMAs ``src`` into a shared-HBM staging buffer of its rank, the cores meet at a barrier
    (the pipe's synchronization: a new ``core_barrier`` phase), and each DMAs its peer's staging
    buffer into ``dst``. Values are exact; the time is two DMA transfers and the barrier wait
    (assumed: the hardware's SBUF-to-SBUF path is one transfer). Inside a loop on a register, the
    call's staging buffers serve every trip, so the cores meet again after receiving, before either
    can send the next trip's tile.
    """
    fn = "sendrecv"
    src, dst = _tile(src, "src", fn), _tile(dst, "dst", fn)
    trace = current_trace()
    ranks = trace.grid[0] if trace.grid else 1
    for role, v in (("src", src), ("dst", dst)):
        if v.buf.memory is not Memory.SBUF:
            raise _fail(fn, f"{role} must be an SBUF tile; got {_describe(v)}", EngineAccessError)
    if src.dtype != dst.dtype:
        raise _fail(fn, f"src is {src.dtype} but dst is {dst.dtype}; sendrecv moves one dtype", DtypeError)
    if src.partitions != dst.partitions or src.free_size != dst.free_size:
        raise _fail(fn, f"src {_describe(src)} and dst {_describe(dst)} must have the same partitions and "
                    f"elements per partition")
    for role, rank in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if not isinstance(rank, int) or not 0 <= rank < min(ranks, 2) or len(trace.grid) > 1:
            raise _fail(fn, f"{role}={rank!r}: sendrecv exchanges between the cores of an LNC=2 launch "
                        f"(kernel[2]); ranks are 0 or 1 and this launch has grid {trace.grid}")
    if dma_engine not in (dma_engine.dma, dma_engine.gpsimd_dma, "dma", "gpsimd_dma"):
        raise _fail(fn, f"dma_engine={dma_engine!r} is not a nisa.dma_engine")
    me = trace.program_id[0]
    k = len(trace.exchanges)
    shape = (src.partitions, src.free_size)
    location = caller_location()
    staging = [TensorView.whole(trace.new_buffer(f"sendrecv{k}.pipe{pipe_id}.from{r}", Memory.HBM, shape,
                                                 src.buf.dtype, location, shared=True))
               for r in range(2)]
    trace.exchanges.append((me, send_to_rank, recv_from_rank, location))
    emit(fn, Opcode.DMA_COPY, Engine.DMA, staging[me], (src,), {}, name=name, queue=trace.next_dma_queue())
    barrier(fn)
    emit(fn, Opcode.DMA_COPY, Engine.DMA, dst, (staging[recv_from_rank],), {}, name=name,
         queue=trace.next_dma_queue())
    if in_dynamic_loop(trace):
        barrier(fn)


def get_nc_version():
    """The nc_version of the chip being traced for (gen3 = trn2, gen4 = trn3)."""
    return nc_version(current_trace().chip.nki_target)


def get_nc_sub_version() -> int:
    """The silicon revision within the nc_version generation: 0, the first revision (the documented
    default; the simulated chips model first revisions)."""
    current_trace()  # like get_nc_version, a question about the kernel being traced
    return 0


class NkiInstruction:
    """Opaque handle to a traced instruction (the type of AWS's ``nisa`` results). The simulator
    orders instructions by the bytes they touch; ``nisa`` calls here return None, so no handle
    reaches ``depends_on``."""

    def __init__(self, handle=None):
        self.handle = handle

    def depends_on(self, *producers):
        raise UnsupportedError("NkiInstruction.depends_on: explicit scheduling edges are not simulated",
                               location=caller_location())
