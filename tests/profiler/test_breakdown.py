"""Per-op engine time and DMA sizes (breakdown.py); recommendations that name their ops (advice.py)."""

import pytest
from profiled_programs import at, dma_only_run, mixed_run

from neuronsim.profiler import advice, report, session
from neuronsim.profiler import summary as S
from neuronsim.profiler.breakdown import SMALL_DMA_BYTES, Breakdown, dma_bucket
from neuronsim.profiler.events import DeviceOpEvent, KernelRun, PlacedRun


@pytest.mark.parametrize("nbytes,bucket", [(0, 0), (511, 0), (512, 1), (32 * 1024 - 1, 3), (32 * 1024, 4),
                                           (10 << 20, 6)])
def test_dma_buckets_are_powers_of_four_from_512_bytes(nbytes, bucket):
    assert dma_bucket(nbytes) == bucket


def test_device_ops_engine_time_and_dma_sizes_per_op():
    small, mixed = dma_only_run(cols=16), mixed_run()  # 8 transfers of 128x16 fp32 = 8 KiB
    events = [DeviceOpEvent("aten::copy_", 0.0, 5000.0, True, kernel=small),
              DeviceOpEvent("aten::copy_", 5000.0, 5000.0, True, kernel=small),
              DeviceOpEvent("aten::mm", 10000.0, 50000.0, True, kernel=mixed),
              DeviceOpEvent("aten::sort", 60000.0, 9000.0, False)]
    b = Breakdown()
    b.add_device_events(events, {})
    copy = b.ops[("aten::copy_", "kernel")]
    assert copy.dma_count[dma_bucket(8192)] == 16 and copy.small_dma_count == 16
    assert copy.small_dma_locations == {at(61): 8, at(62): 8}
    assert copy.engine_active_time["dma"] == pytest.approx(2 * S.summarize(small)["dma_active_time"])
    mm = b.ops[("aten::mm", "kernel")]
    assert mm.engine_active_time["tensor"] == pytest.approx(S.summarize(mixed)["tensor_engine_active_time"])
    assert mm.small_dma_count == 0 and mm.dma_transfer_count == S.summarize(mixed)["dma_transfer_count"]
    assert ("aten::sort", "fallback") in b.ops and b.ops[("aten::sort", "fallback")].dma_transfer_count == 0
    assert b.total.dma_transfer_count == 16 + mm.dma_transfer_count
    sizes = b.dma_sizes()
    assert sum(sizes["count"]) == b.total.dma_transfer_count and len(sizes["labels"]) == len(sizes["count"])
    assert sizes["small_below_bytes"] == SMALL_DMA_BYTES


def test_session_summary_names_the_ops_behind_each_recommendation():
    small = dma_only_run(cols=16)
    rec = session.start("op")
    session.stop()
    events = [DeviceOpEvent("aten::copy_", 0.0, 4000.0, True, kernel=small),
              DeviceOpEvent("aten::sort", 4000.0, 40000.0, False)]
    doc, _ = report.session_profile(rec, {0: events}, small.chip)
    recs = {r["id"]: r for r in doc["recommendations"]}
    assert {"small_dma", "host_fallbacks", "tensor_idle"} <= set(recs)
    assert recs["small_dma"]["ops"][0]["name"] == "aten::copy_"
    assert "8 of 8 transfers below 32 KiB" in recs["small_dma"]["ops"][0]["detail"]
    assert at(61) in recs["small_dma"]["ops"][0]["detail"]
    assert [o["name"] for o in recs["host_fallbacks"]["ops"]] == ["aten::sort"]
    assert [o["name"] for o in recs["tensor_idle"]["ops"]] == ["aten::copy_"]
    copy = next(r for r in doc["ops"] if r["name"] == "aten::copy_")
    assert copy["dma_small_transfer_count"] == 8 and set(copy["engine_active_time"]) == {
        "tensor", "vector", "scalar", "gpsimd", "sync", "dma"}
    assert doc["dma_sizes"]["count"][dma_bucket(8192)] == 8


def test_a_kernel_profile_names_the_kernel_lines_that_issued_small_dmas():
    doc, _ = report.kernel_profile(dma_only_run(cols=16))
    small = next(r for r in doc["recommendations"] if r["id"] == "small_dma")
    assert [o["name"] for o in small["ops"]] == [at(61), at(62)] and small["ops"][0]["kind"] == "source line"


def test_dma_bound_names_the_ops_whose_dma_outlasts_their_compute():
    rows = [{"name": "a", "kind": "kernel", "total_time": 1.0,
             "engine_active_time": {"tensor": 0.1, "vector": 0.2, "dma": 0.9}},
            {"name": "b", "kind": "kernel", "total_time": 1.0,
             "engine_active_time": {"tensor": 0.9, "dma": 0.5}}]
    fields = {**S.empty_summary(), "total_time": 1.0, "dma_active_time_percent": 80.0,
              "tensor_engine_active_time_percent": 50.0}
    (rec,) = [r for r in advice.recommendations(fields, rows) if r["id"] == "dma_bound"]
    assert [o["name"] for o in rec["ops"]] == ["a"] and rec["ops"][0]["detail"] == "DMA 900 ms, vector 200 ms"


def test_a_profile_is_of_one_chip_launches_on_another_are_left_out_with_a_note():
    on_trn2, on_trn3 = dma_only_run("trn2"), dma_only_run("trn3")
    rec = session.start("instruction")
    try:
        session.record_launch([PlacedRun(on_trn2)], "k")
        session.record_launch([PlacedRun(on_trn3)], "k")
        session.record_launch([PlacedRun(KernelRun.from_prepared(on_trn3))], "k")
    finally:
        session.stop()
    doc, trace = report.session_profile(rec, {}, on_trn2.chip)
    assert doc["kernels"] == ["k"] and doc["ops"][0]["count"] == 1
    assert doc["total_time"] == pytest.approx(on_trn2.total_ns * 1e-9)
    assert doc["notes"] == ["2 nki.simulate launches on trn3 left out: this profile is of trn2 "
                            "(profile both with --chip trn2,trn3)"]
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"neuron:0 NeuronCore (trn2, nki.simulate)"}


def test_a_profile_where_nothing_ran_says_how_a_file_of_kernels_is_run():
    rec = session.start("op")
    session.stop()
    doc, _ = report.session_profile(rec, {}, mixed_run().chip)
    assert any("__main__ must call them" in n for n in doc["notes"])
