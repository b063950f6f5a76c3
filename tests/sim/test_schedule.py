"""The scheduler: in-order engines, memory dependencies, DMA engines and TensorE throttling."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.schedule import DMA_TRACK0, schedule_arrays


def _synthetic(tracks, cycles, accesses, chip="trn2"):
    """Schedule instructions given (space, p0, p1, b0, b1, is_write) accesses per instruction."""
    spec = get_chip(chip)
    n = len(tracks)
    ptr = np.zeros(n + 1, np.int64)
    flat = []
    for i, accs in enumerate(accesses):
        flat += accs
        ptr[i + 1] = len(flat)
    clock = np.array([spec.clock_hz(e) / 1e9 for e in ("tensor", "vector", "scalar", "gpsimd")] + [1.0])
    return schedule_arrays(
        np.array(tracks, np.int64), np.array(cycles, np.float64), np.zeros(n), np.full(n, -1, np.int64),
        np.zeros(n, np.int64), ptr, np.array(flat, np.int64).reshape(len(flat), 6), clock,
        DMA_TRACK0 + 16, 16, 4, spec.tensor_throttle_start_fraction, spec.tensor_throttle_ramp_ns,
        spec.tensor_throttle_idle_reset_ns)


VEC, ACT = 1, 2
W = lambda b0, b1: (0, 0, 128, b0, b1, 1)  # noqa: E731  (SBUF write)
R = lambda b0, b1: (0, 0, 128, b0, b1, 0)  # noqa: E731  (SBUF read)


def test_independent_engines_overlap_and_one_engine_is_in_order():
    start, end = _synthetic([VEC, ACT, VEC], [960, 1200, 960], [[W(0, 8)], [W(8, 16)], [W(16, 24)]])
    assert start[1] == 0.0  # ScalarE does not wait for VectorE
    assert start[2] == end[0] == pytest.approx(1000.0)  # 960 cycles at 0.96 GHz, then in order


@pytest.mark.parametrize("first,second", [(W(0, 8), R(4, 12)), (R(0, 8), W(4, 12)), (W(0, 8), W(7, 9))])
def test_raw_war_waw_dependencies(first, second):
    start, end = _synthetic([VEC, ACT], [960, 120], [[first], [second]])
    assert start[1] == end[0]


def test_reads_do_not_depend_on_reads_and_disjoint_bytes_are_independent():
    start, _ = _synthetic([VEC, ACT], [960, 120], [[R(0, 8)], [R(0, 8)]])
    assert start[1] == 0.0
    start, _ = _synthetic([VEC, ACT], [960, 120], [[W(0, 8)], [W(8, 16)]])
    assert start[1] == 0.0
    disjoint_partitions = (0, 64, 128, 0, 8, 0)
    start, _ = _synthetic([VEC, ACT], [960, 120], [[(0, 0, 64, 0, 8, 1)], [disjoint_partitions]])
    assert start[1] == 0.0


def test_a_covering_write_supersedes_older_records():
    """After a write covering an old write, a reader waits for the newest writer only."""
    start, end = _synthetic([VEC, ACT, VEC], [960, 1200, 96], [[W(0, 8)], [W(0, 16)], [R(0, 8)]])
    assert start[2] == end[1]


def test_tensor_engine_throttle_ramps_and_reengages():
    """S26: TensorE starts at ~50% and ramps to 100% over ~3 us; an idle gap re-engages it."""
    spec = get_chip("trn2")
    n = 40
    start, end = _synthetic([0] * n, [512] * n, [[]] * n)
    full = 512 / 2.4
    assert end[0] - start[0] == pytest.approx(full / spec.tensor_throttle_start_fraction)
    assert end[-1] - start[-1] == pytest.approx(full)  # steady state after the ramp
    durations = end - start
    assert np.all(np.diff(durations) <= 1e-9)  # never slower as the burst goes on


def test_single_transfer_dependency_chain_through_sbuf():
    """A store of an SBUF tile waits for the load that filled it (RAW through SBUF)."""
    b = ProgramBuilder()
    a = b.hbm("a", (128, 1024), "float32")
    s = b.sbuf("s", (128, 1024), "float32")
    o = b.hbm("o", (128, 1024), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a], queue=0)
    b.emit(Opcode.DMA_COPY, o, [s], queue=1)
    tl = sim.prepare(b.build()).timeline
    assert tl.start_ns[1] == tl.end_ns[0]


def test_schedule_is_deterministic():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 256), "float32")
    for i in range(8):
        s = b.sbuf(f"s{i}", (128, 256), "float32")
        b.emit(Opcode.DMA_COPY, s, [a], queue=i % 3)
    p = b.build()
    t1 = sim.prepare(p).timeline
    t2 = sim.schedule.schedule_program(p, get_chip("trn2"), sim.prepare(p).placement)
    assert np.array_equal(t1.start_ns, t2.start_ns) and np.array_equal(t1.end_ns, t2.end_ns)
