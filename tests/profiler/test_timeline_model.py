"""The report's timeline model: rows from any trace's tracks, the device on its own clock, the cap."""

import json

import pytest

from neuronsim.profiler import timeline_model as TM
from neuronsim.profiler.timeline_model import model_json, timeline_models


def meta(pid, name, tids=(), sort=None):
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    if sort is not None:
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                    "args": {"sort_index": sort}})
    for tid, tname in tids:
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}})
    return out


def x(pid, tid, name, ts, dur, args=None, cat="kernel"):
    e = {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "cat": cat}
    if args is not None:
        e["args"] = args
    return e


def slices(model, row):
    """(start ns, end ns, name) of a row's lane 0, decoded."""
    lane, t, out = row["lanes"][0], 0, []
    for dt, d, n in zip(lane["t"], lane["d"], lane["n"], strict=True):
        t += dt
        out.append((t, t + d, model["names"][n]))
    return out


def device_trace_in_host_time():
    """Two device ops issued 1 s apart on the host, back to back on the device clock; an
    instruction inside the second op; a host track; a counter."""
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(1, "Device ops"), (12, "VectorE")], sort=-100)
    ev += meta(7, "host (pid 7)", [(1, "Host: time to issue each device op")], sort=-1000)
    ev += [
        x(0, 1, "aten::add", 1000.0, 2.0, {"simulated_start_ns": 0.0, "duration_ns": 2000.0}),
        x(0, 1, "aten::mul", 2_000_000.0, 3.0, {"simulated_start_ns": 2000.0, "duration_ns": 3000.0}),
        x(0, 12, "tensor_tensor", 2_000_001.0, 1.5, {"opcode": "tensor_tensor", "engine": "vector",
                                                     "nki_source_location": "k.py:3"}, cat="vector"),
        {"ph": "C", "pid": 0, "tid": 0, "name": "SBUF in use", "ts": 2_000_001.0, "args": {"bytes": 512}},
        x(7, 1, "aten::add", 0.0, 1000.0, cat="host_op"),
        x(7, 1, "aten::mul", 1000.0, 1_999_000.0, cat="host_op"),
    ]
    return {"traceEvents": ev, "displayTimeUnit": "ns"}


def test_device_on_the_simulated_clock_host_apart_on_the_wall_clock():
    models = timeline_models(device_trace_in_host_time())
    assert set(models) == {"device", "host"}
    dev, host = models["device"], models["host"]
    assert dev["clock"] == "simulated" and host["clock"] == "wall"
    rows = {r["name"]: r for r in dev["rows"]}
    assert [r["name"] for r in dev["rows"]] == ["Device ops", "aten::mul", "aten::add", "VectorE",
                                                "SBUF in use"]
    # the ops back to back as the device clock ran them (the host's 2 s gap is gone)
    assert slices(dev, rows["Device ops"]) == [(0, 2000, "aten::add"), (2000, 5000, "aten::mul")]
    # the instruction moved with its op: 1 us into aten::mul
    assert slices(dev, rows["VectorE"]) == [(3000, 4500, "tensor_tensor")]
    assert dev["names"][rows["VectorE"]["lanes"][0]["o"][0]] == "aten::mul"  # the op it ran in
    assert "o" not in rows["Device ops"]["lanes"][0]
    assert rows["VectorE"]["kind"] == "instruction" and rows["Device ops"]["kind"] == "op"
    assert rows["SBUF in use"]["kind"] == "counter" and rows["SBUF in use"]["t"] == [3000]
    assert dev["span_ns"] == 5000 and dev["focus_ns"] == [0, 5000]
    detail = dev["details"][rows["VectorE"]["lanes"][0]["a"][0]]
    assert detail == {"opcode": "tensor_tensor", "engine": "vector", "nki_source_location": "k.py:3",
                      "cat": "vector"}
    assert [r["name"] for r in host["rows"]] == ["Host: time to issue each device op"]
    assert host["span_ns"] == 2_000_000_000 and host["groups"][0]["kind"] == "host"


def test_ops_a_capped_trace_aggregated_follow_the_last_op_as_long_as_their_busy_time():
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(1, "Device ops")])
    ev += [x(0, 1, "aten::add", 10.0, 2.0, {"simulated_start_ns": 0.0}),
           x(0, 1, "aten::mul", 50.0, 3.0, {"simulated_start_ns": 2000.0}),
           x(0, 1, "500 ops (aggregated)", 900.0, 800.0, {"aggregated_ops": 500, "busy_ns": 7000.0}),
           x(0, 1, "400 ops (aggregated)", 1800.0, 900.0, {"aggregated_ops": 400, "busy_ns": 6000.0})]
    dev = timeline_models({"traceEvents": ev})["device"]
    assert slices(dev, dev["rows"][0]) == [(0, 2000, "aten::add"), (2000, 5000, "aten::mul"),
                                           (5000, 12000, "500 ops (aggregated)"),
                                           (12000, 18000, "400 ops (aggregated)")]


def test_op_rows_get_one_child_per_op_longest_first_open_without_instruction_rows():
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(1, "Device ops")])
    for i in range(6):
        name = ("aten::mm", "aten::add", "aten::add")[i % 3]
        ev.append(x(0, 1, name, i * 10.0, 8.0 if name == "aten::mm" else 1.0,
                    {"simulated_start_ns": i * 10_000.0}))
    dev = timeline_models({"traceEvents": ev})["device"]
    kids = [r for r in dev["rows"] if r.get("parent") == 0]
    assert [k["name"] for k in kids] == ["aten::mm", "aten::add"]
    assert all(k["open"] and k["kind"] == "op-name" for k in kids)
    assert kids[0]["idx"] == [0, 3] and kids[1]["idx"] == [1, 1, 2, 1]  # deltas of indices into the op row


def test_launches_without_device_clock_times_are_laid_back_to_back_after_the_device_ops():
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(1, "Device ops")])
    ev += meta(500, "neuron:0 NeuronCore (trn2, nki.simulate)", [(1, "Kernel"), (100, "DMA q0")])
    ev += meta(501, "neuron:1 NeuronCore (trn2, nki.simulate)", [(1, "Kernel")])
    ev += [x(0, 1, "aten::add", 5.0, 2.0, {"simulated_start_ns": 0.0}),
           x(500, 1, "k", 100.0, 4.0), x(501, 1, "k", 100.0, 3.0),  # one launch on two cores
           x(500, 100, "dma_copy", 101.0, 1.0, {"opcode": "dma_copy"}), x(500, 1, "k2", 900.0, 1.0)]
    dev = timeline_models({"traceEvents": ev})["device"]
    by = {(dev["groups"][r["group"]]["name"], r["name"]): r for r in dev["rows"]}
    core0 = "neuron:0 NeuronCore (trn2, nki.simulate)"
    assert slices(dev, by[(core0, "Kernel")]) == [(2000, 6000, "k"), (6000, 7000, "k2")]
    assert slices(dev, by[("neuron:1 NeuronCore (trn2, nki.simulate)", "Kernel")]) == [(2000, 5000, "k")]
    assert slices(dev, by[(core0, "DMA q0")]) == [(3000, 4000, "dma_copy")]


def test_nested_host_slices_go_to_lanes_and_identical_slices_share_a_record():
    ev = meta(1, "python", [(5, "thread 5")])
    ev += [x(1, 5, "outer", 0.0, 10.0, {"External id": 1}, cat="cpu_op"),
           x(1, 5, "inner", 1.0, 2.0, {"External id": 2}, cat="cpu_op"),
           x(1, 5, "inner", 4.0, 2.0, {"External id": 3}, cat="cpu_op"),
           x(1, 5, "after", 10.0, 1.0)]
    host = timeline_models({"traceEvents": ev})["host"]
    (row,) = host["rows"]
    assert len(row["lanes"]) == 2 and row["lanes"][1]["n"] == [1, 1]
    assert row["lanes"][1]["a"][0] == row["lanes"][1]["a"][1]  # External id is left out of the record
    deep = [x(1, 5, f"d{i}", float(i), 100.0 - 2 * i) for i in range(TM.MAX_LANES + 2)]
    host = timeline_models({"traceEvents": meta(1, "python", [(5, "t")]) + deep})["host"]
    assert len(host["rows"][0]["lanes"]) == TM.MAX_LANES and host["stats"]["undrawn_nested_slices"] == 2


def test_past_the_cap_the_longest_rows_are_aggregated_small_rows_kept():
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(10, "VectorE"), (100, "DMA q0")])
    ev += [x(0, 10, "op", float(i), 0.5, {"opcode": "op"}) for i in range(1000)]
    ev += [x(0, 100, "dma_copy", float(i), 0.5, {"opcode": "dma_copy"}) for i in range(10)]
    dev = timeline_models({"traceEvents": ev}, max_slices=110)["device"]
    vector, dma = dev["rows"]
    assert sum(len(lane["t"]) for lane in dma["lanes"]) == 10
    assert sum(len(lane["t"]) for lane in vector["lanes"]) == 100
    assert dev["stats"]["aggregated_slices"] == 1000 and dev["stats"]["slices"] == 110
    first = slices(dev, vector)[0]
    assert first == (0, 9500, "10 slices (aggregated)")


def test_counters_past_their_budget_keep_each_runs_maximum():
    ev = meta(0, "neuron:0 NeuronCore (trn2, simulated)", [(1, "Device ops")])
    ev.append(x(0, 1, "op", 0.0, 100.0, {"simulated_start_ns": 0.0}))
    ev += [{"ph": "C", "pid": 0, "name": "Pending DMA count", "ts": float(i), "args": {"n": i % 10}}
           for i in range(100)]
    dev = timeline_models({"traceEvents": ev}, max_counter_samples=20)["device"]
    counter = dev["rows"][-1]
    assert counter["kind"] == "counter" and counter["t"] == [0] + [5000] * 19
    assert counter["series"]["n"] == [4.0, 9.0] * 10  # runs of 5 samples: 0..4, 5..9


def test_unnamed_tracks_and_empty_traces():
    assert timeline_models({"traceEvents": []}) == {}
    host = timeline_models({"traceEvents": [x("Spans", "t1", "s", 0.0, 1.0)]})["host"]
    assert host["groups"][0]["name"] == "Spans" and host["rows"][0]["name"] == "t1"


def test_model_json_is_safe_inside_a_script_element():
    text = model_json({"names": ["</script><b>"]})
    assert "</" not in text and json.loads(text) == {"names": ["</script><b>"]}


@pytest.mark.parametrize("counts,cap,expect", [
    ({"a": 5, "b": 5}, 100, {"a": 5, "b": 5}),
    ({"a": 10, "b": 1000}, 110, {"a": 10, "b": 100}),
    ({"a": 300, "b": 300, "c": 1}, 101, {"a": 50, "b": 50, "c": 1}),
])
def test_budgets_are_max_min_fair(counts, cap, expect):
    assert TM._budgets(counts, cap) == expect
