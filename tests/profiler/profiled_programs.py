"""Small kernels for profiler tests, built from whichever engines are implemented (OPDEFS)."""

from __future__ import annotations

from neuronsim import sim
from neuronsim.profiler.events import KernelRun
from neuronsim.sim import ActFunc, AluOp, Opcode, ProgramBuilder
from neuronsim.sim.engines import OPDEFS

HERE = "tests/profiler/profiled_programs.py"


def at(line: int) -> str:
    return f"{HERE}:{line}"


def mixed_program(tiles: int = 3, name: str = "mixed"):
    """DMA in, matmul into PSUM, activation, reduce, iota, DMA out — the implemented parts."""
    b = ProgramBuilder(name, location=at(1))
    k, m, n = 128, 128, 512
    a = b.hbm("a", (tiles, k, m), "bfloat16")
    w = b.hbm("w", (tiles, k, n), "bfloat16")
    out = b.hbm("out", (tiles, m, n), "float32", kind="output")
    for t in range(tiles):
        a_sb = b.sbuf(f"a_sb{t}", (k, m), "bfloat16")
        w_sb = b.sbuf(f"w_sb{t}", (k, n), "bfloat16")
        b.emit(Opcode.DMA_COPY, a_sb, [a.ap([[m, k], [1, m]], offset=t * k * m)], location=at(10), queue=0)
        b.emit(Opcode.DMA_COPY, w_sb, [w.ap([[n, k], [1, n]], offset=t * k * n)], location=at(11), queue=1)
        res = w_sb
        if Opcode.NC_MATMUL in OPDEFS:
            ps = b.psum(f"ps{t}", (m, n), "float32")
            b.emit(Opcode.NC_MATMUL, ps, [a_sb, w_sb], location=at(12))
            res = ps
        if Opcode.ACTIVATION in OPDEFS:
            act = b.sbuf(f"act{t}", (m, n), "float32")
            b.emit(Opcode.ACTIVATION, act, [res], func=ActFunc.relu, location=at(13))
            res = act
        if Opcode.TENSOR_REDUCE in OPDEFS:
            red = b.sbuf(f"red{t}", (m, 1), "float32")
            b.emit(Opcode.TENSOR_REDUCE, red, [res], op=AluOp.add, num_axes=1, location=at(14))
        if Opcode.IOTA in OPDEFS:
            io = b.sbuf(f"iota{t}", (m, 64), "int32")
            b.emit(Opcode.IOTA, io, [], pattern=[(1, 64)], location=at(15))
        if res.memory is sim.Memory.SBUF and res.dtype.name == "float32":
            b.emit(Opcode.DMA_COPY, out.ap([[n, m], [1, n]], offset=t * m * n), [res], location=at(16),
                   queue=2)
        else:
            o_sb = b.sbuf(f"o{t}", (m, n), "float32")
            b.emit(Opcode.DMA_COPY, o_sb, [res], location=at(17), queue=3)
            b.emit(Opcode.DMA_COPY, out.ap([[n, m], [1, n]], offset=t * m * n), [o_sb], location=at(16),
                   queue=2)
    return b.build()


def mixed_run(chip: str = "trn2", tiles: int = 3) -> KernelRun:
    return KernelRun.from_prepared(sim.prepare(mixed_program(tiles), chip))


def dma_only_run(chip: str = "trn2", transfers: int = 4, cols: int = 64) -> KernelRun:
    b = ProgramBuilder("dma_only", location=at(60))
    src = b.hbm("src", (transfers, 128, cols), "float32")
    dst = b.hbm("dst", (transfers, 128, cols), "float32", kind="output")
    for t in range(transfers):
        s = b.sbuf(f"s{t}", (128, cols), "float32")
        b.emit(Opcode.DMA_COPY, s, [src.ap([[cols, 128], [1, cols]], offset=t * 128 * cols)],
               location=at(61), queue=t % 2)
        b.emit(Opcode.DMA_COPY, dst.ap([[cols, 128], [1, cols]], offset=t * 128 * cols), [s],
               location=at(62), queue=2 + t % 2)
    return KernelRun.from_prepared(sim.prepare(b.build(), chip))
