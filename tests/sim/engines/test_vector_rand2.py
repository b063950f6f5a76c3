"""VectorE's XORWOW rand2 (sim/engines/vector_rand2.py) on both executors: the assumed generator,
written out independently here, the [min, max] mapping, the advanced state, cost and checks."""

import numpy as np
import pytest
from reduce_cases import EXECUTORS, registered_opcodes

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.engines import OPDEFS, vector_rand2

TRN3 = get_chip("trn3")


def xorwow_model(state: np.ndarray, n: int, lo: float, hi: float):
    """Marsaglia's xorwow per generator (4 per lane, element j from generator j % 4), u = top 24 bits
    * 2^-24, value = lo + (hi - lo) * u in fp32."""
    s = state.astype(np.uint64).copy()
    out = np.empty((s.shape[0], n), np.float32)
    m = np.uint64(0xFFFFFFFF)
    for p in range(s.shape[0]):
        for j in range(n):
            g = s[p, 6 * (j % 4):6 * (j % 4) + 6]
            x, v = g[0], g[4]
            t = (x ^ (x >> np.uint64(2))) & m
            g[0:4] = g[1:5].copy()
            g[4] = (v ^ ((v << np.uint64(4)) & m)) ^ (t ^ ((t << np.uint64(1)) & m))
            g[5] = (g[5] + np.uint64(362437)) & m
            bits = int((g[4] + g[5]) & m)
            u = np.float32(bits >> 8) * np.float32(2.0**-24)
            out[p, j] = np.float32(np.float32(lo) + np.float32(np.float32(hi - lo) * u))
    return out, s.astype(np.uint32)


def rand2_program(p, n, dtype="float32", **imm):
    b = ProgramBuilder("rand2")
    seeds, state = b.hbm("seeds", (p, 24), "uint32"), b.sbuf("state", (p, 24), "uint32")
    b.emit(Opcode.DMA_COPY, state, [seeds])
    y = b.sbuf("y", (p, n), dtype)
    b.emit(Opcode.RAND2, y, [state], dst2=state, location="k.py:5", **imm)
    b.emit(Opcode.DMA_COPY, b.hbm("y_out", (p, n), dtype, kind="output"), [y])
    b.emit(Opcode.DMA_COPY, b.hbm("state_out", (p, 24), "uint32", kind="output"), [state])
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rand2_is_the_xorwow_model_in_the_range_and_advances_the_state(executor):
    rng = np.random.default_rng(2)
    seeds = rng.integers(1, 2**32, (8, 24), dtype=np.uint64).astype(np.uint32)
    out = sim.run(rand2_program(8, 37, min=-2.0, max=6.0), {"seeds": seeds}, chip=TRN3,
                  executor=executor).outputs
    want, state = xorwow_model(seeds, 37, -2.0, 6.0)
    assert np.array_equal(out["y_out"], want)
    assert np.array_equal(out["state_out"], state)
    assert out["y_out"].min() >= -2.0 and out["y_out"].max() <= 6.0 and np.unique(out["y_out"]).size > 30


def test_rand2_checks_and_cost():
    """v4 only; min < max; the state is [P, 24] uint32 and also dst2; dst dtypes of S16."""
    assert OPDEFS[Opcode.RAND2].cycles(rand2_program(8, 100, min=0.0, max=1.0).instructions[1], TRN3) == 100
    with pytest.raises(ConstraintError, match="k.py:5.*NeuronCore-v4"):
        sim.prepare(rand2_program(8, 4, min=0.0, max=1.0), "trn2")
    with pytest.raises(ConstraintError, match="min=2.0 must be below max=1.0"):
        sim.prepare(rand2_program(8, 4, min=2.0, max=1.0), TRN3)
    with pytest.raises(DtypeError, match="dst is bool_"):
        sim.prepare(rand2_program(8, 4, "bool_", min=0.0, max=1.0), TRN3)


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_rand2) == {Opcode.RAND2}
