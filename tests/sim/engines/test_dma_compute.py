"""DMA compute (sim/engines/dma_compute.py): dst = the fp32 sum of up to 4 sources, on both executors;
its transfer time and checks."""

import ml_dtypes
import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, LOC, registered_opcodes

from neuronsim import sim
from neuronsim.errors import ConstraintError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import dma_compute
from neuronsim.sim.engines.dma import transfer_bytes


@pytest.mark.parametrize("executor", EXECUTORS)
def test_sum_of_hbm_and_sbuf_sources_in_fp32_rounded_once(executor):
    """S16: each source cast to fp32, summed left to right, cast to dst's dtype (qkv_cte's fused
    residual add: input + mlp_prev + attention_prev, rows of HBM into SBUF)."""
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    b = ProgramBuilder()
    hbm = [b.hbm(f"x{k}", (64, 96), "bfloat16") for k in range(3)]
    s = b.sbuf("s", (64, 96), "bfloat16")
    b.emit(Opcode.DMA_COMPUTE, s, hbm, location=LOC)
    out = b.hbm("out", (64, 96), "float32", kind="output")
    b.emit(Opcode.DMA_COMPUTE, out, [s, hbm[0].ap([[96, 64], [1, 96]])], location=LOC)  # s + x0, to fp32
    got = sim.run(b.build(), {f"x{k}": x for k, x in enumerate(xs)}, executor=executor).outputs["out"]
    f = [x.astype(np.float32) for x in xs]
    first = ((f[0] + f[1]) + f[2]).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(got, first + f[0])


def test_transfer_counts_every_source_and_checks():
    b = ProgramBuilder()
    srcs = [b.hbm(f"x{k}", (128, 256), "bfloat16") for k in range(3)]
    s = b.sbuf("s", (128, 256), "float32")
    ins = b.emit(Opcode.DMA_COMPUTE, s, srcs)
    assert transfer_bytes(ins) == 3 * 128 * 256 * 2  # the sources streamed outweigh the fp32 dst
    small = b.sbuf("small", (128, 128), "float32")
    b.emit(Opcode.DMA_COMPUTE, small, srcs[:1], location=LOC)
    with pytest.raises(ConstraintError, match="srcs.0. has 32768 elements but dst has 16384"):
        sim.prepare(b.build(), CHIP)


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(dma_compute) == {Opcode.DMA_COMPUTE}
