"""neuronsim.nki.timing: the schedule of a kernel without executing it."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import SbufCapacityError
from neuronsim.nki.timing import profile_timing


@nki.jit
def _scale_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out


@nki.jit
def _too_big(x):
    t = nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return x


def test_timing_profile_equals_a_simulated_run(chip):
    x = np.random.default_rng(0).random((512, 256), dtype=np.float32)
    _, simulated = nki.simulate(_scale_rows, profile=True, chip=chip)(x)
    timed = profile_timing(_scale_rows, chip=chip)(np.empty_like(x))
    assert timed.summary == simulated.summary
    assert timed.timeline == simulated.timeline


def test_timing_raises_the_same_capacity_error():
    with pytest.raises(SbufCapacityError, match="60000"):
        profile_timing(_too_big, chip="trn2")(np.empty((128, 60000), np.float32))


@nki.jit
def _hwdge_load(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.scalar)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_hardware_dge_dma_triggers_from_the_engine_it_names():
    """S18: a hardware-DGE dma_copy costs ~600 ns on the engine that triggers it (here ScalarE)."""
    profile = profile_timing(_hwdge_load, chip="trn2")(np.empty((128, 128), np.float32))
    triggers = [e for e in profile.timeline if e.opcode == "DMA_TRIGGER"]
    assert [(e.engine, round(e.duration * 1e9)) for e in triggers] == [("scalar", 600)]
