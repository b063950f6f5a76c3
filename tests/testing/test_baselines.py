"""Baseline files: the record of a measurement, the TOML file (round trip, sorted, quoted keys), the
diff table, and bad files named."""

import tomllib

import pytest

from neuronsim.errors import InputError
from neuronsim.testing.baselines import MAX_OP_ROWS, OTHER_OPS, BaselineStore, diff_table, dumps, figures

SUMMARY = {
    "total_time": 12.5e-6, "tensor_engine_active_time": 4e-6, "vector_engine_active_time": 3.25e-6,
    "scalar_engine_active_time": 0.0, "gpsimd_engine_active_time": 0.0, "sync_engine_active_time": 0.0,
    "dma_active_time": 9e-6, "hbm_read_bytes": 1 << 20, "hbm_write_bytes": 1 << 19, "dma_transfer_count": 12,
    "host_fallback_count": 1,
}
OPS = {"aten::addmm": 6e-6, "aten::gelu": 2e-6, "aten::cumsum (fallback)": 4.5e-6}


def test_figures_keep_time_engines_traffic_and_ops_in_microseconds():
    r = figures(SUMMARY, OPS)
    assert r["time_us"] == 12.5 and r["hbm_read_bytes"] == 1 << 20 and r["hbm_write_bytes"] == 1 << 19
    assert r["dma_transfers"] == 12 and r["host_fallbacks"] == 1
    assert r["engine_active_us"] == {"tensor": 4.0, "vector": 3.25, "scalar": 0.0, "gpsimd": 0.0, "sync": 0.0,
                                     "dma": 9.0}
    assert list(r["op_us"]) == ["aten::addmm", "aten::cumsum (fallback)", "aten::gelu"]  # slowest first


def test_figures_round_away_float_noise_and_cap_the_op_rows():
    noisy = dict(SUMMARY, total_time=12.5e-6 + 1e-21)
    assert figures(noisy, {})["time_us"] == figures(SUMMARY, {})["time_us"]
    many = {f"op{i:03d}": (i + 1) * 1e-6 for i in range(MAX_OP_ROWS + 5)}
    r = figures(SUMMARY, many)["op_us"]
    assert len(r) == MAX_OP_ROWS + 1
    assert r[OTHER_OPS] == pytest.approx(sum(range(1, 6)))  # the five fastest, summed


def test_the_file_round_trips_sorted_with_quoted_keys(tmp_path):
    store = BaselineStore(tmp_path / "neuron_baselines.toml")
    assert store.put("test_b.py::test_two[bf16]", "step", "trn2", figures(SUMMARY, OPS)) == "new"
    assert store.put("test_a.py::test_one", "forward", "trn3", figures(SUMMARY, {})) == "new"
    store.save()
    text = store.path.read_text()
    assert text.startswith("# neuronsim performance baselines")
    first = text.index('["test_a.py::test_one".forward.trn3]')
    assert first < text.index('["test_b.py::test_two[bf16]".step.trn2]')
    assert '"aten::addmm" = 6.0' in text
    again = BaselineStore(store.path)
    assert again.get("test_b.py::test_two[bf16]", "step", "trn2") == figures(SUMMARY, OPS)
    assert again.get("test_b.py::test_two[bf16]", "step", "trn3") is None
    assert again.put("test_a.py::test_one", "forward", "trn3", figures(SUMMARY, {})) == "same"
    faster = figures(dict(SUMMARY, total_time=1e-6), {})
    assert again.put("test_a.py::test_one", "forward", "trn3", faster) == "changed"
    assert dumps(tomllib.loads(text)) == text  # what is read is written back the same


def test_diff_table_shows_the_total_and_what_changed():
    before = figures(SUMMARY, OPS)
    after = figures(dict(SUMMARY, total_time=15e-6, tensor_engine_active_time=6e-6),
                    {"aten::addmm": 8e-6, "aten::gelu": 2e-6, "aten::mm": 1e-6})
    lines = diff_table(before, after).splitlines()
    assert lines[0].split() == ["op", "or", "engine", "before", "after", "change"]
    rows = {line.split("  ")[0].strip(): line for line in lines[1:]}
    assert "12.500 us" in rows["total"] and "15.000 us" in rows["total"] and "+20.00%" in rows["total"]
    assert "+50.00%" in rows["engine tensor"]
    assert "+33.33%" in rows["op aten::addmm"]
    assert rows["op aten::mm"].split()[-1] == "new"
    assert rows["op aten::cumsum (fallback)"].split()[-1] == "gone"
    assert "op aten::gelu" not in rows and "engine vector" not in rows  # unchanged rows are left out
    assert lines[1].startswith("total")


def test_a_broken_file_is_named(tmp_path):
    path = tmp_path / "neuron_baselines.toml"
    path.write_text("[not toml")
    with pytest.raises(InputError, match="neuron_baselines.toml is not valid TOML"):
        BaselineStore(path).get("t", "n", "trn2")
    path.write_text('"test_x.py::t" = 3\n')
    with pytest.raises(InputError, match="is not a table"):
        BaselineStore(path).get("t", "n", "trn2")
