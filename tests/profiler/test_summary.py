"""summary.py against the timeline it summarizes: busy times, bytes and FLOPs add up."""

import numpy as np
import pytest
from kernels import dma_only_run, mixed_run

from neuronsim.profiler import summary as S
from neuronsim.profiler.events import FALLBACK, TRANSFER, DeviceOpEvent, from_clock_events
from neuronsim.sim.engines.dma import transfer_bytes
from neuronsim.sim.ir import DMA_OPS, Engine, Memory, Opcode
from neuronsim.sim.schedule import DMA_TRACK0


def _brute_union(starts, ends, step=0.25):
    """Union length by sampling a fine grid (independent of union_ns)."""
    if not len(starts):
        return 0.0
    grid = np.arange(min(starts), max(ends), step) + step / 2
    covered = np.zeros(grid.size, bool)
    for s, e in zip(starts, ends, strict=False):
        covered |= (grid >= s) & (grid < e)
    return covered.sum() * step


def test_union_of_overlapping_intervals():
    s, e = np.array([0.0, 5.0, 2.0, 20.0, 21.0]), np.array([3.0, 8.0, 4.0, 30.0, 22.0])
    assert S.union_ns(s, e) == pytest.approx(4 + 3 + 10)
    assert S.union_ns(np.array([]), np.array([])) == 0.0


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_kernel_summary_matches_its_timeline(chip):
    run = mixed_run(chip)
    s = S.summarize(run)
    tl, prog = run.timeline, run.program
    assert s["total_time"] == pytest.approx(tl.total_ns * 1e-9)
    index, track, is_pre, start, end = tl.events()  # main steps (issue to done) and the steps before
    for engine in S.ENGINES:
        mask = track == int(Engine[engine.upper()])
        busy = _brute_union(start[mask], end[mask])
        # pipelined instructions overlap: the active time is the union of their spans
        assert s[f"{engine}_engine_active_time"] == pytest.approx(busy * 1e-9, rel=1e-3)
        busy = float((end - start)[mask].sum())
        assert s[f"{engine}_engine_instruction_time"] == pytest.approx(busy * 1e-9)
        assert s[f"{engine}_engine_instruction_count"] == mask.sum()
        assert s[f"{engine}_engine_active_time_percent"] == pytest.approx(
            100 * s[f"{engine}_engine_active_time"] / s["total_time"])
        assert s[f"{engine}_engine_active_time"] <= s["total_time"] * (1 + 1e-12)
    matmuls = sum(i.opcode is Opcode.NC_MATMUL for i in prog.instructions)
    assert s["tensor_engine_instruction_count"] == 2 * matmuls + sum(
        i.opcode is not Opcode.NC_MATMUL and i.engine is Engine.TENSOR for i in prog.instructions)
    assert s["instruction_count"] == len(prog.instructions) == int((~is_pre).sum())
    dma = track >= DMA_TRACK0
    union = _brute_union(start[dma], end[dma])
    assert s["dma_active_time"] == pytest.approx(union * 1e-9, rel=1e-3)
    dma_ins = [i for i in prog.instructions if i.opcode in DMA_OPS]
    assert s["dma_transfer_count"] == len(dma_ins)
    assert s["dma_transfer_total_bytes"] == sum(transfer_bytes(i) for i in dma_ins)
    assert s["dma_transfer_average_bytes"] == pytest.approx(s["dma_transfer_total_bytes"] / len(dma_ins))
    assert s["hbm_read_bytes"] == sum(i.srcs[0].nbytes for i in dma_ins if i.srcs[0].memory is Memory.HBM)
    assert s["hbm_write_bytes"] == sum(i.dst.nbytes for i in dma_ins if i.dst.memory is Memory.HBM)
    matmuls = [i for i in prog.instructions if i.opcode is Opcode.NC_MATMUL]
    assert s["matmul_instruction_count"] == len(matmuls)
    assert s["model_flops"] == sum(2 * m.srcs[0].partitions * m.srcs[0].free_size * m.srcs[1].free_size
                                   for m in matmuls)
    peak = run.chip.tensor_engine_peak_flops_bf16
    assert s["mfu_estimated_percent"] == pytest.approx(100 * s["model_flops"] / (peak * s["total_time"]))
    assert s["sbuf_peak_bytes"] == run.placement.sbuf_peak_bytes
    assert s["psum_peak_bytes"] == run.placement.psum_peak_bytes
    assert set(s) == set(S.FIELDS)


def test_dma_active_time_is_the_union_over_queues():
    run = dma_only_run(transfers=6)
    s = S.summarize(run)
    tl = run.timeline
    per_queue = float((tl.end_ns - tl.start_ns).sum()) * 1e-9
    assert s["dma_active_time"] <= per_queue
    assert s["dma_active_time"] == pytest.approx(_brute_union(tl.start_ns, tl.end_ns) * 1e-9, rel=1e-3)
    assert s["dma_queue_count"] == 4
    assert s["model_flops"] == 0 and s["mfu_estimated_percent"] == 0.0


def test_merge_adds_up_and_recomputes_derived_fields():
    a, b = S.summarize(mixed_run()), S.summarize(dma_only_run())
    chip = mixed_run().chip
    m = S.merge_summaries([a, b], chip)
    for f in S.ADDITIVE:
        assert m[f] == pytest.approx(a[f] + b[f])
    assert m["total_time"] == pytest.approx(a["total_time"] + b["total_time"])
    assert m["sbuf_peak_bytes"] == max(a["sbuf_peak_bytes"], b["sbuf_peak_bytes"])
    assert m["tensor_engine_active_time_percent"] == pytest.approx(
        100 * m["tensor_engine_active_time"] / m["total_time"])
    assert m["mfu_estimated_percent"] == pytest.approx(
        100 * m["model_flops"] / (chip.tensor_engine_peak_flops_bf16 * m["total_time"]))
    assert m["dma_transfer_average_bytes"] == pytest.approx(
        (a["dma_transfer_total_bytes"] + b["dma_transfer_total_bytes"])
        / (a["dma_transfer_count"] + b["dma_transfer_count"]))


def _device_run():
    run = mixed_run()
    k = run.total_ns
    return run, [
        DeviceOpEvent("aten::mm", 0.0, 1000.0 + k, True, launch_ns=1000.0, kernel=run),
        DeviceOpEvent("aten::sort", 1000.0 + k, 20_000.0, False, bytes=4096),
        DeviceOpEvent("aten::_to_copy", 21_000.0 + k, 5_000.0, False, TRANSFER, bytes=1 << 20,
                      direction="d2h"),
        DeviceOpEvent("aten::mm", 26_000.0 + k, 1000.0 + k, True, launch_ns=1000.0, kernel=run),
        DeviceOpEvent("aten::relu", 27_000.0 + 2 * k, 700.0, True, flops=0,
                      engine_busy_ns={"scalar": 300.0, "dma": 200.0}),
        DeviceOpEvent("aten::sort", 27_700.0 + 2 * k, 20_000.0, False),
    ]


def test_device_summary_is_the_sum_of_op_summaries_plus_host_fallbacks():
    run, events = _device_run()
    k = S.summarize(run)
    s = S.device_summary(events, run.chip)
    assert s["total_time"] == pytest.approx(events[-1].end_ns * 1e-9)
    assert s["model_flops"] == 2 * k["model_flops"]
    assert s["tensor_engine_active_time"] == pytest.approx(2 * k["tensor_engine_active_time"])
    assert s["scalar_engine_active_time"] == pytest.approx(2 * k["scalar_engine_active_time"] + 300e-9)
    assert s["dma_active_time"] == pytest.approx(2 * k["dma_active_time"] + 200e-9)
    assert s["host_fallback_time"] == pytest.approx(40_000e-9)
    assert s["host_fallback_count"] == 2
    assert s["host_transfer_bytes"] == 1 << 20 and s["host_transfer_count"] == 1
    assert s["kernel_count"] == 3 and s["kernel_launch_time"] == pytest.approx(2000e-9)
    assert s["host_fallback_time_percent"] == pytest.approx(100 * 40_000e-9 / s["total_time"])
    assert s["mfu_estimated_percent"] == pytest.approx(
        100 * s["model_flops"] / (run.chip.tensor_engine_peak_flops_bf16 * s["total_time"]))


def test_op_table_and_fallback_ops():
    run, events = _device_run()
    table = S.op_table(events)
    rows = {(r["name"], r["kind"]): r for r in table}
    assert rows[("aten::sort", FALLBACK)]["count"] == 2
    assert rows[("aten::sort", FALLBACK)]["total_time"] == pytest.approx(40_000e-9)
    assert rows[("aten::mm", "kernel")]["model_flops"] == 2 * S.summarize(run)["model_flops"]
    assert sum(r["total_time_percent"] for r in table) == pytest.approx(100.0)
    assert table[0]["total_time"] >= table[-1]["total_time"]
    assert S.fallback_ops(events) == {"aten::sort": 2}


def test_from_clock_events_groups_the_device_clocks_records():
    from neuronsim.device.clock import DeviceClock

    clock = DeviceClock(0)
    clock.charge_transfer("aten::_to_copy", (), 4096, to_device=True)
    clock.charge_fallback("aten::sort", (), 1000, 500)
    clock.charge_kernel("aten::mm", (), 2500.0, nbytes=64)
    clock.charge_fallback("aten::sort", (), 1000, 500)
    ops = from_clock_events(clock.events())
    assert [(o.name, o.kind) for o in ops] == [
        ("aten::_to_copy", TRANSFER), ("aten::sort", FALLBACK), ("aten::mm", "kernel"),
        ("aten::sort", FALLBACK)]
    assert ops[0].direction == "h2d" and ops[0].bytes == 4096
    assert ops[1].bytes == 1500
    assert ops[2].native and ops[2].launch_ns > 0
    assert ops[2].duration_ns == pytest.approx(ops[2].launch_ns + 2500)
    assert sum(o.duration_ns for o in ops) == pytest.approx(clock.now_ns)
    for a, b in zip(ops, ops[1:], strict=False):
        assert b.start_ns == pytest.approx(a.end_ns)


def test_device_summary_of_repeated_kernels_is_the_merge_of_every_op(monkeypatch):
    """The per-distinct-kernel shortcut gives what merging every op's summary one by one gives."""
    runs = [mixed_run(), dma_only_run(transfers=5)]
    events, t = [], 0.0
    for i in range(40):
        run = runs[i % 3 % 2]
        events.append(DeviceOpEvent("aten::k", t, 200.0 + run.total_ns, True, launch_ns=200.0, kernel=run))
        t = events[-1].end_ns
        if i % 7 == 0:
            events.append(DeviceOpEvent("aten::sort", t, 900.0, False))
            t = events[-1].end_ns
    calls = []
    real = S.summarize
    monkeypatch.setattr(S, "summarize", lambda run: calls.append(run) or real(run))
    cache: dict = {}
    s = S.device_summary(events, runs[0].chip, cache)
    S.op_table(events, cache=cache)
    assert len(calls) == 2  # once per distinct kernel, shared with the op table
    native = [e for e in events if e.kind == "kernel"]
    fallbacks = [e for e in events if e.kind == FALLBACK]
    expect = S.merge_summaries([{**real(e.kernel), "kernel_launch_time": e.launch_ns * 1e-9} for e in native],
                               runs[0].chip, total_time=t * 1e-9,
                               host_fallback_time=sum(e.duration_ns for e in fallbacks) * 1e-9,
                               host_fallback_count=len(fallbacks))
    assert set(s) == set(expect)
    for f, v in expect.items():
        assert s[f] == pytest.approx(v, rel=1e-9), f
    assert s["kernel_count"] == 40 and s["model_flops"] == sum(real(e.kernel)["model_flops"] for e in native)


def test_from_clock_events_builds_one_kernel_run_per_program():
    from types import SimpleNamespace

    from neuronsim.device.clock import DeviceClock

    run = mixed_run()
    prepared = SimpleNamespace(program=run.program, timeline=run.timeline, chip=run.chip,
                               placement=run.placement)
    clock = DeviceClock(0)
    for _ in range(3):
        clock.charge_kernel("aten::k", (), run.total_ns, kernel=prepared)
    ops = from_clock_events(clock.events())
    assert len(ops) == 3 and ops[0].kernel is ops[1].kernel is ops[2].kernel
    assert ops[0].kernel.program is run.program and ops[0].wall_ns is not None
