"""An HBM tensor's bytes as another dtype (``.view(dtype)``, ``.ap(pattern, dtype=...)``): an HBM alias
(``TensorDecl.alias_of``) bound to the same host bytes, ordered with its tensor by the schedule."""

import ml_dtypes
import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim import sim
from neuronsim.errors import ConstraintError, UnsupportedError
from neuronsim.sim import Memory, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType


@nki.jit
def round_trip(t):
    """Writes an output through its float32 view, then reads the output back as bf16."""
    out = nl.ndarray(t.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    words = nl.ndarray((t.shape[0], t.shape[1] // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=words, src=t.view(nl.float32))
    nisa.dma_copy(dst=out.view(nl.float32), src=words)
    back = nl.ndarray(t.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=back, src=out)
    again = nl.ndarray(t.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=again, src=back)
    return out, again


def test_a_view_shares_its_tensors_bytes_and_order():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    (out, again), prof = nki.simulate(round_trip, profile=True)(x)
    assert np.array_equal(out.view(np.uint16), x.view(np.uint16))
    assert np.array_equal(again.view(np.uint16), x.view(np.uint16))
    dmas = sorted((e for e in prof.timeline if e.engine == "dma"), key=lambda e: e.start)
    write, read = dmas[1], dmas[2]  # into out through the view, then out read back
    assert read.start >= write.end  # the view's write orders the tensor's read


def test_reinterpretation_mistakes_name_the_line():
    @nki.jit
    def odd(t):
        return t.view(nl.float32)

    with pytest.raises(ConstraintError, match=r"test_hbm_reinterpret.py:\d+.*not a multiple of float32"):
        nki.simulate(odd)(np.zeros((4, 3), ml_dtypes.bfloat16))

    @nki.jit
    def returns_view(t):
        out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out.view(nl.float32)

    with pytest.raises(UnsupportedError, match="a dtype view of HBM tensor"):
        nki.simulate(returns_view)(np.zeros((4, 4), ml_dtypes.bfloat16))


def test_an_alias_must_cover_an_earlier_larger_hbm_tensor():
    b = ProgramBuilder("alias")
    b.tensor("x", Memory.HBM, (4, 4), DType.bfloat16, kind="input")
    b.tensor("y", Memory.HBM, (4, 4), DType.float32, kind="input", alias_of=0)  # 64 bytes over 32
    prog = b.build()
    with pytest.raises(ConstraintError, match="aliases tensor 0"):
        sim.prepare(prog, get_chip("trn2"))
