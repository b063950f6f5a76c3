"""Each gate passes and fails with a message saying what was expected, what was measured and where
the time went; bad gate arguments are errors naming the argument. Measurements made by hand here;
measured blocks and kernel profiles are in test_measure.py, the pytest fixtures in
tests/test_pytest_plugin.py."""

import pytest

from neuronsim.errors import GateFailure, InputError
from neuronsim.testing import BaselineStore, Gates, Measurement


def measurement(us=10.0, fallback=None, **fields):
    summary = {"total_time": us * 1e-6, "tensor_engine_active_time_percent": 42.0,
               "dma_active_time_percent": 80.0, "vector_engine_active_time_percent": 5.0,
               "hbm_read_bytes": 4096, "hbm_write_bytes": 1024,
               "dma_transfer_total_bytes": 5120, "mfu_estimated_percent": 12.5, **fields}
    ops = {"aten::addmm": us * 0.6e-6, "aten::gelu": us * 0.3e-6, "aten::cumsum (fallback)": us * 0.1e-6}
    return Measurement(summary, ops, dict(fallback or {}), chip="trn2")


def test_no_fallback_names_the_ops_that_fell_back():
    gates = Gates()
    gates.check(measurement(), no_fallback=True)
    with pytest.raises(GateFailure) as err:
        gates.check(measurement(fallback={"aten::cumsum": 2, "aten::sort.stable": 1}), no_fallback=True)
    message = str(err.value)
    assert message.startswith("2 ops fell back to the host in this block on trn2 (3 calls): ")
    assert "aten::cumsum x2, aten::sort.stable x1" in message
    assert isinstance(err.value, AssertionError)


def test_budget():
    gates = Gates()
    gates.check(measurement(us=10.0), budget_us=10.0)
    with pytest.raises(GateFailure) as err:
        gates.check(measurement(us=12.5), budget_us=10)
    message = str(err.value)
    assert ("simulated device time of this block on trn2 is 12.500 us, over the budget of 10 us by 25.0%"
            in message)
    assert "aten::addmm: 7.500 us (60%)" in message  # where the time went
    assert "engines active: tensor 42%" in message


def test_bounds_on_engines_traffic_and_summary_fields():
    gates = Gates()
    gates.check(measurement(), bounds={"tensor": (40, None), "dma": (None, 90), "hbm_bytes": (5120, 5120),
                                       "dma_bytes": (None, 8192), "mfu": (10, 20),
                                       "hbm_write_bytes": (1, None)})
    with pytest.raises(GateFailure) as err:
        gates.check(measurement(), bounds={"tensor": (50, None), "hbm_read_bytes": (None, 2048),
                                           "vector": (1, 10)})
    message = str(err.value)
    assert "tensor = 42.0% is below the lower bound 50.0%" in message
    assert "hbm_read_bytes = 4,096 bytes is above the upper bound 2,048 bytes" in message
    assert "vector =" not in message  # 5% is within (1, 10)


def test_baseline_missing_recorded_matching_and_changed(tmp_path):
    store = BaselineStore(tmp_path / "neuron_baselines.toml")
    gates = Gates(store, "test_x.py::test_y", update_hint="UPDATE")
    with pytest.raises(GateFailure, match=r"no baseline 'fwd' for test_x.py::test_y on trn2 in "
                                          r".*neuron_baselines.toml \(measured 10.000 us\). "
                                          r"Record it with UPDATE"):
        gates.check(measurement(), baseline="fwd")
    Gates(store, "test_x.py::test_y", update=True).check(measurement(), baseline="fwd")
    store.save()
    gates = Gates(BaselineStore(store.path), "test_x.py::test_y", update_hint="UPDATE")
    gates.check(measurement(), baseline="fwd")
    gates.check(measurement(us=10.2), baseline="fwd", tolerance_pct=2)
    with pytest.raises(GateFailure) as err:
        gates.check(measurement(us=11.0), baseline="fwd", tolerance_pct=2)
    message = str(err.value)
    assert message.startswith("simulated device time of this block on trn2 changed from the baseline 'fwd': "
                              "10.000 us -> 11.000 us (+10.00%; the gate asks for within 2%)")
    assert "op or engine" in message and "op aten::addmm" in message and "update it with UPDATE" in message
    with pytest.raises(GateFailure, match="the gate asks for exactly"):
        gates.check(measurement(us=9.99), baseline="fwd")


def test_every_failure_of_a_block_is_reported_together():
    with pytest.raises(GateFailure) as err:
        Gates().check(measurement(us=20, fallback={"aten::cumsum": 1}), no_fallback=True, budget_us=5,
                      bounds={"tensor": (90, None)})
    message = str(err.value)
    assert "fell back" in message and "over the budget" in message and "below the lower bound" in message


@pytest.mark.parametrize("kwargs, match", [
    ({"budget_us": 0}, "budget_us=0: a time budget is a positive number"),
    ({"tolerance_pct": -1}, "tolerance_pct=-1"),
    ({"bounds": {"tensr": (1, 2)}}, "unknown bound 'tensr': use an engine"),
    ({"bounds": {"tensor": 50}}, r"bound tensor=50: give \(low, high\)"),
    ({"baseline": "x"}, "baseline 'x': these gates have no baseline file"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(InputError, match=match):
        Gates().check(measurement(), **kwargs)


def test_check_takes_only_profiles_and_measurements():
    with pytest.raises(InputError, match="expected the profile of nki.simulate"):
        Gates().check({"total_time": 1.0}, budget_us=1)
