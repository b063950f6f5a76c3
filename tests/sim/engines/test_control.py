"""Sequencer control (engines/control.py): registers and branches (S16 nisa.register_*,
nl.dynamic_range), run by both executors; the schedule follows the path each run took."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip

EXECUTORS = ["numba", "reference"]
F = 8


def _counted_loop(location="k.py:3"):
    """for c in range(start, n): acc += 1 ; count = c (n from HBM, start a constant 2).

    0 REGISTER_LOAD  n <- bound          4 TENSOR_SCALAR acc += 1
    1 REGISTER_MOVE  c <- 2              5 REGISTER_MOVE c <- c + 1
    2 BRANCH c >= n -> 7                 6 BRANCH always -> 2
    3 REGISTER_STORE last <- c           7 DMA out <- acc
    """
    b = ProgramBuilder("loop")
    bound_hbm = b.hbm("bound", (1, 1), "int32")
    out = b.hbm("out", (1, F), "float32", kind="output")
    last_hbm = b.hbm("last", (1, 1), "int32", kind="output")
    bound = b.sbuf("bound_sb", (1, 1), "int32")
    acc = b.sbuf("acc", (1, F), "float32")
    last = b.sbuf("last_sb", (1, 1), "int32")
    b.emit(Opcode.DMA_COPY, bound, [bound_hbm])
    b.emit(Opcode.MEMSET, acc, value=0.0)
    b.emit(Opcode.MEMSET, last, value=-1.0)
    b.emit(Opcode.REGISTER_LOAD, None, [bound], dst_reg=0)
    b.emit(Opcode.REGISTER_MOVE, None, dst_reg=1, src_reg=-1, value=2)
    top = 5
    b.emit(Opcode.BRANCH, None, reg=1, cmp="greater_equal", rhs_reg=0, target=10, location=location)
    b.emit(Opcode.REGISTER_STORE, last, src_reg=1)
    b.emit(Opcode.TENSOR_SCALAR, acc, [acc], op0="add", operand0=1.0)
    b.emit(Opcode.REGISTER_MOVE, None, dst_reg=1, src_reg=1, value=1)
    b.emit(Opcode.BRANCH, None, cmp="always", target=top)
    b.emit(Opcode.DMA_COPY, out, [acc])
    b.emit(Opcode.DMA_COPY, last_hbm, [last])
    return b.build()


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("n", [0, 2, 3, 7])
def test_counted_loop_runs_its_register_trip_count(executor, n):
    """range(2, n): max(0, n - 2) iterations; the last counter value is stored through a register."""
    r = sim.run(_counted_loop(), {"bound": np.array([[n]], np.int32)}, executor=executor)
    trips = max(0, n - 2)
    np.testing.assert_array_equal(r.outputs["out"], np.full((1, F), trips, np.float32))
    assert r.outputs["last"][0, 0] == (n - 1 if trips else -1)
    # the run's instructions, as they ran: 7 before and after the loop, 5 per trip, the exit test
    assert len(r.prepared.program.instructions) == len(r.timeline) == 8 + 5 * trips


def test_schedule_is_per_path_and_grows_with_the_trip_count():
    """DESIGN decision 4: a data-dependent kernel has no fixed time; equal paths share a schedule."""
    prog = _counted_loop()
    times = [sim.run(prog, {"bound": np.array([[n]], np.int32)}).timeline.total_ns for n in (2, 4, 9)]
    assert times[0] < times[1] < times[2]
    again = sim.run(prog, {"bound": np.array([[4]], np.int32)})
    assert again.timeline.total_ns == times[1]
    assert again.prepared is sim.run(prog, {"bound": np.array([[4]], np.int32)}).prepared


def test_control_cost_is_the_sequencer_figures():
    """A control instruction costs sequencer_instruction_cycles, a register load register_load_cycles,
    at the Sync engine clock (assumed figures, chips/)."""
    chip = get_chip("trn2")
    r = sim.run(_counted_loop(), {"bound": np.array([[2]], np.int32)})
    ins = r.prepared.program.instructions
    tl = r.timeline
    ghz = chip.sync_engine_clock_hz / 1e9
    for i, x in enumerate(ins):
        if x.opcode is Opcode.REGISTER_LOAD:
            assert tl.end_ns[i] - tl.start_ns[i] == pytest.approx(chip.register_load_cycles / ghz)
        elif x.opcode is Opcode.BRANCH:
            assert tl.end_ns[i] - tl.start_ns[i] == pytest.approx(chip.sequencer_instruction_cycles / ghz)


def test_instructions_after_a_branch_wait_for_its_decision():
    r = sim.run(_counted_loop(), {"bound": np.array([[4]], np.int32)})
    ins, tl = r.prepared.program.instructions, r.timeline
    branch = -1
    for i, x in enumerate(ins):
        if branch >= 0:
            assert tl.start_ns[i] >= tl.done_ns[branch]
        if x.opcode is Opcode.BRANCH:
            branch = i


@pytest.mark.parametrize("executor", EXECUTORS)
def test_registers_wrap_at_32_bits(executor):
    b = ProgramBuilder("wrap")
    out = b.hbm("out", (1, 2), "int32", kind="output")
    t = b.sbuf("t", (1, 2), "int32")
    b.emit(Opcode.REGISTER_MOVE, None, dst_reg=0, src_reg=-1, value=2**31 - 1)
    b.emit(Opcode.REGISTER_MOVE, None, dst_reg=1, src_reg=0, value=1)
    b.emit(Opcode.REGISTER_STORE, t.ap([[2, 1], [1, 1]], 0), src_reg=0)
    b.emit(Opcode.REGISTER_STORE, t.ap([[2, 1], [1, 1]], 1), src_reg=1)
    b.emit(Opcode.DMA_COPY, out, [t])
    r = sim.run(b.build(), executor=executor)
    np.testing.assert_array_equal(r.outputs["out"], [[2**31 - 1, -(2**31)]])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_loop_that_never_ends_is_stopped_with_its_line(executor, monkeypatch):
    from neuronsim.sim import execute_reference

    monkeypatch.setattr(execute_reference, "MAX_JUMPS", 100)
    b = ProgramBuilder("forever")
    b.emit(Opcode.REGISTER_MOVE, None, dst_reg=0, src_reg=-1, value=1)
    b.emit(Opcode.BRANCH, None, reg=0, cmp="not_equal", value=0, target=1, location="k.py:9")
    with pytest.raises(ConstraintError, match="does not end") as e:
        sim.run(b.build(), executor=executor)
    assert e.value.location == "k.py:9"


def test_misuse_is_rejected_before_running():
    b = ProgramBuilder("bad")
    f = b.sbuf("f", (1, 1), "float32")
    b.emit(Opcode.MEMSET, f, value=1.0)
    b.emit(Opcode.REGISTER_LOAD, None, [f], dst_reg=0, location="k.py:4")
    with pytest.raises(DtypeError, match="loads an integer") as e:
        sim.run(b.build())
    assert e.value.location == "k.py:4"
    b = ProgramBuilder("bad_target")
    b.emit(Opcode.BRANCH, None, cmp="always", target=5, location="k.py:5")
    with pytest.raises(ConstraintError, match="branches to instruction 5"):
        sim.run(b.build())
    b = ProgramBuilder("bad_cmp")
    b.emit(Opcode.BRANCH, None, reg=0, cmp="sometimes", target=0, location="k.py:6")
    with pytest.raises(ConstraintError, match="cmp='sometimes'"):
        sim.run(b.build())
