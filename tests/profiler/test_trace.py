"""Traces from kernel timelines and device op events, checked by the validator."""

import dataclasses
import json

import pytest
from kernels import dma_only_run, mixed_run

from neuronsim.profiler import summary as S
from neuronsim.profiler import trace as T
from neuronsim.profiler.events import DeviceOpEvent
from neuronsim.profiler.validate import TraceValidationError, check_trace, validate_trace
from neuronsim.sim.ir import Opcode


def _slices(trace, cat=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e.get("cat") == cat)]


def _track_names(trace):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_kernel_trace_is_valid_and_draws_every_instruction(chip):
    run = mixed_run(chip)
    trace = T.kernel_trace(run)
    check_trace(trace)
    assert trace["displayTimeUnit"] == "ns"
    json.dumps(trace)  # serializable
    names = _track_names(trace)
    assert {"TensorE (LoadStationary)", "TensorMatrix (MultiplyMoving)", "VectorE", "ScalarE", "GpSimd",
            "Sync", "DMA q0", "DMA q1", "DMA q2"} <= set(names.values())
    instr = [e for e in _slices(trace) if "opcode" in e.get("args", {})]
    matmuls = sum(i.opcode is Opcode.NC_MATMUL for i in run.program.instructions)
    assert len(instr) == len(run.program.instructions) + matmuls  # a matmul is two sub-slices
    for e in instr:
        assert e["args"]["nki_source_location"].startswith("tests/profiler/kernels.py:")
        assert e["args"]["operands"]


def test_matmul_is_split_into_load_stationary_and_multiply_moving():
    run = mixed_run()
    if not any(i.opcode is Opcode.NC_MATMUL for i in run.program.instructions):
        pytest.skip("nc_matmul is not implemented yet")
    trace = T.kernel_trace(run)
    by_index = {}
    for e in _slices(trace, "tensor"):
        by_index.setdefault(e["args"]["index"], {})[e["name"]] = e
    for index, parts in by_index.items():
        if run.program.instructions[index].opcode is not Opcode.NC_MATMUL:
            continue
        tl = run.timeline
        load, move = parts["LoadStationary"], parts["MultiplyMoving"]
        assert load["ts"] == pytest.approx(tl.pre_start_ns[index] / 1000, abs=1e-3)
        assert load["ts"] + load["dur"] == pytest.approx(tl.pre_done_ns[index] / 1000, abs=1e-3)
        assert move["ts"] == pytest.approx(tl.start_ns[index] / 1000, abs=1e-3)
        assert move["ts"] + move["dur"] == pytest.approx(tl.done_ns[index] / 1000, abs=1e-3)
        assert load["ts"] <= move["ts"]


def test_counters_report_memory_in_use_and_dma_bandwidth():
    run = mixed_run()
    trace = T.kernel_trace(run)
    counters = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(e)
    expected = {"SBUF in use", "PSUM in use", "HBM in use", "DMA throughput (GB/s)", "Pending DMA count"}
    assert expected <= set(counters)
    sbuf_peak = max(e["args"]["bytes"] for e in counters["SBUF in use"])
    assert 0 < sbuf_peak <= run.placement.sbuf_peak_bytes
    assert counters["SBUF in use"][-1]["args"]["bytes"] == 0
    tp = counters["DMA throughput (GB/s)"]
    # GB/s = bytes per ns; ts in us
    moved = sum(a["args"]["total"] * (b["ts"] - a["ts"]) * 1000 for a, b in zip(tp, tp[1:], strict=False))
    # bin edges are kept to the ns (us to 3 decimals): ~1 ns x the rate per bin of rounding
    assert moved == pytest.approx(S.summarize(run)["dma_transfer_total_bytes"], rel=1e-3)
    assert max(e["args"]["transfers"] for e in counters["Pending DMA count"]) >= 1


def test_instruction_cap_aggregates_and_says_so():
    run = mixed_run(tiles=6)
    trace = T.kernel_trace(run, max_instruction_events=10)
    check_trace(trace)
    stats = trace["otherData"]["neuronsim"]
    assert stats["aggregated"] and stats["aggregated_instructions"] == len(run.program.instructions)
    assert not [e for e in _slices(trace) if "opcode" in e.get("args", {})]
    agg = _slices(trace, "aggregated")
    assert agg and sum(e["args"]["aggregated_instructions"] for e in agg) == len(run.program.instructions)
    assert any(e["ph"] == "i" and "capped" in e["name"] for e in trace["traceEvents"])


def _ops(n, run=None):
    events, t = [], 0.0
    for i in range(n):
        if run is not None and i % 2 == 0:
            e = DeviceOpEvent("aten::mm", t, 1000.0 + run.total_ns, True, launch_ns=1000.0, kernel=run)
        elif i % 5 == 1:
            e = DeviceOpEvent("aten::_to_copy", t, 3000.0, False, "transfer", bytes=64, direction="h2d")
        else:
            e = DeviceOpEvent("aten::sort" if i % 2 else "aten::add.Tensor", t, 2500.0, i % 2 == 0)
        events.append(e)
        t = e.end_ns
    return events


def test_device_op_trace_has_one_slice_per_op_on_its_track():
    events = _ops(40)
    trace = T.device_trace(events, chip_name="trn2")
    check_trace(trace)
    ops = [e for e in _slices(trace) if "kind" in e.get("args", {})]
    assert len(ops) == 40
    names = _track_names(trace)
    for e in ops:
        assert names[(e["pid"], e["tid"])] == {"kernel": "Device ops", "fallback": "Host fallback",
                                               "transfer": "Host transfers"}[e["args"]["kind"]]
    assert sum(e["dur"] for e in ops) == pytest.approx(sum(e.duration_ns for e in events) / 1000, rel=1e-6)


def test_device_trace_is_on_the_simulated_timeline_even_with_host_issue_times():
    events = _ops(6)
    wall = 1_800_000_000_000_000_000
    issued = [dataclasses.replace(e, wall_ns=wall + 7919 * i) for i, e in enumerate(events)]
    ops = [e for e in _slices(T.device_trace(issued, chip_name="trn2")) if "kind" in e.get("args", {})]
    assert [e["ts"] for e in ops] == [T.us(e.start_ns) for e in events]


def test_device_instruction_detail_draws_kernels_inside_their_op():
    run = dma_only_run()
    events = _ops(12, run)
    trace = T.device_trace(events, chip_name="trn2", detail="instruction")
    check_trace(trace)
    kernels = [e for e in events if e.kernel is not None]
    instr = [e for e in _slices(trace) if "opcode" in e.get("args", {})]
    assert len(instr) == len(kernels) * len(run.program.instructions)
    first = [e for e in instr if e["args"]["index"] == 0][1]  # second kernel's first instruction
    op = [e for e in _slices(trace) if e["name"] == "aten::mm"][1]
    assert op["ts"] + events[0].launch_ns / 1000 <= first["ts"] + 1e-3
    assert first["ts"] + first["dur"] <= op["ts"] + op["dur"] + 1e-3


def test_device_trace_stays_bounded_on_long_runs():
    run = dma_only_run()
    events = _ops(3000, run)
    trace = T.device_trace(events, chip_name="trn2", detail="instruction", max_instruction_events=500,
                           max_op_events=1000)
    check_trace(trace)
    stats = trace["otherData"]["neuronsim"]
    assert stats["aggregated"] and stats["op_events"] == 1000 and stats["aggregated_ops"] == 2000
    assert stats["instruction_events"] <= 500
    assert len(trace["traceEvents"]) < 6000
    agg_ops = [e for e in _slices(trace) if "aggregated_ops" in e.get("args", {})]
    assert sum(e["args"]["aggregated_ops"] for e in agg_ops) == 2000


# ---------------------------------------------------------------- the validator itself

def _base(*events, names=True):
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "neuron:0 core"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "VectorE"}},
            {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "host"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "main"}}]
    return {"traceEvents": (meta if names else []) + list(events), "displayTimeUnit": "ns"}


def X(pid, ts, dur, tid=1, name="s"):
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def test_validator_accepts_back_to_back_and_nested_host_slices():
    assert validate_trace(_base(X(1, 0, 1.0), X(1, 1.0, 2.0), X(2, 0, 10), X(2, 1, 2), X(2, 4, 1))) == []


@pytest.mark.parametrize("trace,problem", [
    (_base(X(1, 0, 2.0), X(1, 1.0, 2.0)), "overlaps"),
    (_base(X(1, 0, 10), X(1, 1, 2)), "overlaps"),  # nesting is an overlap on a device track
    (_base(X(2, 0, 2.0), X(2, 1.0, 2.0)), "partly overlaps"),
    (_base(X(1, 0, 1), names=False), "no process_name"),
    (_base(X(1, 0, 1, tid=7)), "no thread_name"),
    (_base({"ph": "Q", "name": "x", "pid": 1, "ts": 0}), "unknown phase"),
    (_base({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0}), "dur"),
    (_base({"ph": "B", "name": "x", "pid": 1, "tid": 1, "ts": 0}), "without E"),
    (_base({"ph": "E", "pid": 1, "tid": 1, "ts": 0}), "without a matching B"),
    (_base({"ph": "C", "name": "c", "pid": 1, "ts": 0, "args": {"v": "x"}}), "finite"),
    (_base({"ph": "M", "name": "bogus", "pid": 1, "args": {}}), "unknown metadata"),
    ({"traceEvents": [], "displayTimeUnit": "s"}, "displayTimeUnit"),
    ({"events": []}, "traceEvents"),
])
def test_validator_rejects(trace, problem):
    problems = validate_trace(trace)
    assert any(problem in p for p in problems), problems
    with pytest.raises(TraceValidationError):
        check_trace(trace)
