"""The scheduler: in-order engines, memory dependencies, pipeline latency, TensorE's two steps and
throttling, ScalarE's table loads."""

import numpy as np
import pytest

from neuronsim import sim
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.ir import ActFunc, AluOp, Engine
from neuronsim.sim.schedule import DMA_TRACK0, PRE_NONE, ScheduleInputs, run_schedule, schedule_inputs

TRN2 = get_chip("trn2")


def _synthetic(tracks, cycles, accesses, latency_ns=0.0, chip=TRN2):
    """Schedule compute instructions given (space, p0, p1, b0, b1, is_write) accesses each; every
    instruction's results land ``latency_ns`` (one value, or one per instruction) after its issue
    interval."""
    n = len(tracks)
    ptr = np.zeros(n + 1, np.int64)
    flat = []
    for i, accs in enumerate(accesses):
        flat += [(*a, 0) for a in accs]
        ptr[i + 1] = len(flat)
    clock = np.array([chip.clock_hz(e) / 1e9 for e in ("tensor", "vector", "scalar", "gpsimd")] + [1.0])
    zeros = np.zeros(n)
    inp = ScheduleInputs(
        np.array(tracks, np.int64), np.array(cycles, np.float64), zeros,
        np.broadcast_to(np.asarray(latency_ns, np.float64), (n,)).copy(),
        np.full(n, PRE_NONE, np.int64), np.full(n, -1, np.int64), zeros, zeros, np.full(n, -1, np.int64),
        np.zeros(n, np.int64), zeros, zeros, ptr, np.array(flat, np.int64).reshape(len(flat), 7), clock,
        np.array([chip.tensor_throttle_start_fraction, chip.tensor_throttle_ramp_ns,
                  chip.tensor_throttle_window_ns, chip.tensor_throttle_utilization_threshold,
                  chip.dma_queue_issue_interval_ns, chip.dma_engines]))
    start, end, done, *_ = run_schedule(inp, DMA_TRACK0 + 16, 4)
    return start, end, done


PE, VEC, ACT = 0, 1, 2
W = lambda b0, b1: (0, 0, 128, b0, b1, 1)  # noqa: E731  (SBUF write)
R = lambda b0, b1: (0, 0, 128, b0, b1, 0)  # noqa: E731  (SBUF read)


def test_independent_engines_overlap_and_one_engine_is_in_order():
    start, end, _ = _synthetic([VEC, ACT, VEC], [960, 1200, 960], [[W(0, 8)], [W(8, 16)], [W(16, 24)]])
    assert start[1] == 0.0  # ScalarE does not wait for VectorE
    assert start[2] == end[0] == pytest.approx(1000.0)  # 960 cycles at 0.96 GHz, then in order


@pytest.mark.parametrize("first,second", [(W(0, 8), R(4, 12)), (R(0, 8), W(4, 12)), (W(0, 8), W(7, 9))])
def test_raw_war_waw_dependencies_wait_for_results_to_land(first, second):
    start, end, done = _synthetic([VEC, ACT], [960, 120], [[first], [second]], latency_ns=50.0)
    assert start[1] == done[0] == pytest.approx(end[0] + 50.0)


def test_on_one_engine_only_a_read_of_a_result_waits_for_its_latency():
    """Issue order already orders an engine's writes after its earlier accesses; a dependent read
    pays the latency (S20: back-to-back dependent ScalarE instructions)."""
    start, end, done = _synthetic([ACT, ACT, ACT], [120, 120, 120], [[W(0, 8)], [W(0, 8)], [R(0, 8)]],
                                  latency_ns=300.0)
    assert start[1] == end[0]  # WAW on one engine: back to back
    assert start[2] == done[1]  # RAW: waits for the result to land


def test_reads_do_not_depend_on_reads_and_disjoint_bytes_are_independent():
    start, *_ = _synthetic([VEC, ACT], [960, 120], [[R(0, 8)], [R(0, 8)]])
    assert start[1] == 0.0
    start, *_ = _synthetic([VEC, ACT], [960, 120], [[W(0, 8)], [W(8, 16)]])
    assert start[1] == 0.0
    disjoint_partitions = (0, 64, 128, 0, 8, 0)
    start, *_ = _synthetic([VEC, ACT], [960, 120], [[(0, 0, 64, 0, 8, 1)], [disjoint_partitions]])
    assert start[1] == 0.0


def test_a_covering_write_supersedes_older_records():
    """After a write covering an old write, a reader waits for the newest writer only."""
    start, end, _ = _synthetic([VEC, ACT, VEC], [960, 1200, 96], [[W(0, 8)], [W(0, 16)], [R(0, 8)]])
    assert start[2] == end[1]


def _keep_every_read(tracks, cycles, accesses, latency_ns, clock_ghz):
    """The dependency rule with no record of a read ever dropped (only covering writes drop
    records): what the scheduler's pruning of repeated reads must reproduce exactly."""
    records, free, done = [], {}, []
    for tr, cyc, accs, lat in zip(tracks, cycles, accesses, latency_ns, strict=True):
        ready = 0.0
        for a in accs:
            for b, b_track, b_done in records:
                ordered = b_track == tr and (a[5] == 1 or b[5] == 0)
                overlap = a[0] == b[0] and a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]
                if (a[5] or b[5]) and not ordered and overlap:
                    ready = max(ready, b_done)
        start = max(ready, free.get(tr, 0.0))
        free[tr] = start + cyc / clock_ghz[tr]
        done.append(free[tr] + lat)
        for a in accs:
            if a[5]:
                records = [r for r in records if not (r[0][0] == a[0] and a[1] <= r[0][1] and r[0][2] <= a[2]
                                                      and a[3] <= r[0][3] and r[0][4] <= a[4])]
            records.append((a, tr, done[-1]))
    return np.array(done)


def test_dropping_repeated_reads_changes_no_time():
    """Reads covered by a later read of the same stream are dropped (a tile read over and over
    would otherwise make the schedule quadratic); random programs with overlapping reads and
    writes, mixed latencies, schedule exactly as if every read were kept."""
    rng = np.random.default_rng(0)
    clock = {tr: TRN2.clock_hz(e) / 1e9 for tr, e in ((VEC, "vector"), (ACT, "scalar"), (3, "gpsimd"))}
    for _ in range(20):
        n = 60
        tracks = rng.choice([VEC, ACT, 3], n).tolist()
        cycles = rng.integers(50, 500, n).tolist()
        latency = rng.choice([0.0, 40.0, 300.0], n)
        accesses = []
        for _ in range(n):
            accs = []
            for _ in range(int(rng.integers(1, 4))):
                b0 = int(rng.integers(0, 6))
                accs.append((0, 0, 128, b0, b0 + int(rng.integers(1, 4)), int(rng.random() < 0.25)))
            accesses.append(accs)
        _, _, done = _synthetic(tracks, cycles, accesses, latency_ns=latency)
        np.testing.assert_array_equal(done, _keep_every_read(tracks, cycles, accesses, latency, clock))


def test_tensor_engine_throttle_ramps_from_half_rate():
    """S26: a burst starts at ~50% of full rate and ramps to 100% over ~3 us."""
    n = 40
    start, end, _ = _synthetic([PE] * n, [512] * n, [[]] * n)
    full = 512 / 2.4
    assert end[0] - start[0] == pytest.approx(full / TRN2.tensor_throttle_start_fraction)
    assert end[-1] - start[-1] == pytest.approx(full)  # steady state after the ramp
    assert np.all(np.diff(end - start) <= 1e-9)  # never slower as the burst goes on


def _bursts(gap_ns, n=40):
    """Matmul-sized TensorE instructions (213 ns at full rate) that each wait ``gap_ns`` after the
    previous one's result (a chain through SBUF written by VectorE)."""
    tracks, cycles, accesses = [], [], []
    for i in range(n):
        tracks += [PE, VEC]
        cycles += [512, 0.001]
        accesses += [[R(8 * i, 8 * i + 8)], [W(8 * i + 8, 8 * i + 16), R(8 * i, 8 * i + 8)]]
    latency = np.array([0.0, gap_ns] * n)
    return tracks, cycles, accesses, latency


@pytest.mark.parametrize("gap_ns, throttled", [(150.0, False), (1200.0, True)])
def test_throttle_reengages_when_utilization_stays_below_half(gap_ns, throttled):
    """S26: the limit re-engages whenever utilization over a ~3 us window is below 50% — also when
    no single gap is long (TensorE busy ~15% with 1.2 us gaps stays throttled)."""
    tracks, cycles, accesses, latency = _bursts(gap_ns)
    n = len(tracks)
    ptr = np.cumsum([0] + [len(a) for a in accesses])
    acc = np.array([(*a, 0) for accs in accesses for a in accs], np.int64)
    clock = np.array([2.4, 0.96, 1.2, 1.2, 1.0])
    zeros = np.zeros(n)
    none = np.full(n, -1)
    inp = ScheduleInputs(np.array(tracks), np.array(cycles, float), zeros, latency, np.zeros(n, np.int64),
                         none, zeros, zeros, none, np.zeros(n, np.int64), zeros, zeros, ptr, acc, clock,
                         np.array([0.5, 3000.0, 3000.0, 0.5, 840.0, 16.0]))
    start, end, *_ = run_schedule(inp, DMA_TRACK0 + 16, 4)
    last = (end - start)[np.array(tracks) == PE][-1]
    full = 512 / 2.4
    assert last == pytest.approx(full / 0.5 if throttled else full)


# ---------------------------------------------------------------- on real programs

def _matmul_program(n_matmuls, dtype="bfloat16"):
    b = ProgramBuilder("mm")
    a = b.sbuf("a", (128, 128), dtype)
    m = b.sbuf("m", (128, 512), dtype)
    acc = b.psum("acc", (128, 512))
    for i in range(n_matmuls):
        b.emit(Opcode.NC_MATMUL, acc, [a, m], accumulate=i > 0)
    return b.build()


def test_matmul_runs_load_stationary_then_multiply_moving():
    """A lone nc_matmul: LoadStationary (N_stationary / 4 cycles, x4 for fp32), then MultiplyMoving;
    each step's bar ends when its results land (tensor_engine_pipeline_latency_cycles)."""
    tl = sim.prepare(_matmul_program(1, "float32"), "trn2", uninitialized_memory="zero").timeline
    latency = TRN2.tensor_engine_pipeline_latency_cycles / 2.4
    assert tl.pre_track[0] == int(Engine.TENSOR)
    assert tl.pre_start_ns[0] == 0.0
    load = 4 * 128 / 4 / 2.4
    assert tl.pre_done_ns[0] == pytest.approx(load + latency)
    assert tl.start_ns[0] == pytest.approx(load)
    assert tl.done_ns[0] == pytest.approx(tl.end_ns[0] + latency)


def test_load_stationary_hides_behind_the_previous_multiply_moving():
    """Back to back, each LS starts with the previous MM and MMs follow each other with no gap
    (accumulating into one PSUM bank costs no latency: TensorE adds in pipeline order)."""
    tl = sim.prepare(_matmul_program(6), "trn2", uninitialized_memory="zero").timeline
    assert np.allclose(tl.pre_start_ns[1:], tl.start_ns[:-1])
    assert np.allclose(tl.start_ns[1:], tl.end_ns[:-1])


def _activations(funcs):
    b = ProgramBuilder("acts")
    x = b.sbuf("x", (128, 64), "float32")
    for i, f in enumerate(funcs):
        y = b.sbuf(f"y{i}", (128, 64), "float32")
        b.emit(Opcode.ACTIVATION, y, [x], func=f)
    return b.build()


def test_activation_table_loads_when_the_function_set_changes():
    """ScalarE loads a function's table set (act_table_load_ns) before an activation whose function
    is not in the loaded set; table-free functions (copy, relu, ...) need none."""
    funcs = [ActFunc.copy, ActFunc.exp, ActFunc.tanh, ActFunc.gelu, ActFunc.relu, ActFunc.exp]
    tl = sim.prepare(_activations(funcs), "trn2", uninitialized_memory="zero").timeline
    loads = tl.pre_track >= 0
    assert loads.tolist() == [False, True, False, True, False, True]
    assert np.allclose((tl.pre_done_ns - tl.pre_start_ns)[loads], TRN2.act_table_load_ns)
    assert np.all(tl.start_ns[loads] >= tl.pre_done_ns[loads])


def test_latency_is_charged_to_the_consumer_not_the_engine():
    """VectorE issues back to back; ScalarE reading VectorE's result waits for it to land."""
    b = ProgramBuilder("chain")
    x = b.sbuf("x", (128, 512), "float32")
    y = b.sbuf("y", (128, 512), "float32")
    z = b.sbuf("z", (128, 512), "float32")
    w = b.sbuf("w", (128, 512), "float32")
    b.emit(Opcode.TENSOR_SCALAR, y, [x], engine=Engine.VECTOR, op0=AluOp.add, operand0=1.0)
    b.emit(Opcode.TENSOR_SCALAR, z, [x], engine=Engine.VECTOR, op0=AluOp.add, operand0=2.0)
    b.emit(Opcode.ACTIVATION, w, [y], func=ActFunc.copy)
    tl = sim.prepare(b.build(), "trn2", uninitialized_memory="zero").timeline
    assert tl.start_ns[1] == tl.end_ns[0]
    assert tl.done_ns[0] == pytest.approx(tl.end_ns[0] + TRN2.vector_engine_pipeline_latency_cycles / 0.96)
    assert tl.start_ns[2] == pytest.approx(tl.done_ns[0])


def test_single_transfer_dependency_chain_through_sbuf():
    """A store of an SBUF tile is triggered when the load that filled it is done (RAW through SBUF)."""
    b = ProgramBuilder()
    a = b.hbm("a", (128, 1024), "float32")
    s = b.sbuf("s", (128, 1024), "float32")
    o = b.hbm("o", (128, 1024), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a], queue=0)
    b.emit(Opcode.DMA_COPY, o, [s], queue=1)
    tl = sim.prepare(b.build()).timeline
    assert tl.issue_ns[1] == tl.done_ns[0] == tl.end_ns[0]


def test_schedule_is_deterministic():
    b = ProgramBuilder()
    a = b.hbm("a", (128, 256), "float32")
    for i in range(8):
        s = b.sbuf(f"s{i}", (128, 256), "float32")
        b.emit(Opcode.DMA_COPY, s, [a], queue=i % 3)
    p = b.build()
    t1 = sim.prepare(p).timeline
    t2 = sim.schedule.schedule_program(p, TRN2, sim.prepare(p).placement)
    assert np.array_equal(t1.start_ns, t2.start_ns) and np.array_equal(t1.done_ns, t2.done_ns)


def test_engine_busy_is_the_time_with_a_span_running():
    """Timeline.engine_busy_ns: per track, the union of its spans (issue to done, steps before)."""
    tl = sim.prepare(_matmul_program(4), "trn2", uninitialized_memory="zero").timeline
    assert tl.engine_busy_ns["tensor"] == pytest.approx(tl.done_ns[-1] - tl.pre_start_ns[0])


def test_schedule_inputs_mark_the_stationary_operand():
    """LoadStationary waits only for the stationary operand's writers."""
    program = _matmul_program(1)
    inp = schedule_inputs(program, TRN2, sim.prepare(program, uninitialized_memory="zero").placement)
    assert inp.acc[:, 6].tolist() == [1, 0, 0]  # stationary read, moving read, dst write
