"""The pytest plugin, run by pytest's own ``pytester`` on small suites as a user's project would run
it (in a subprocess: enabling the device is process-wide): inert unless enabled; enabled by the
option or the environment before conftests import torch; the fixtures; each gate passing and
failing with its message; baselines recorded, compared with a diff table, and updated."""

import json
import os
import re

import pytest

from neuronsim import env
from neuronsim.profiler.summary import FIELDS
from neuronsim.sim._numba_cache import (
    cache_root,  # imported here: pytester drops modules first imported in a test
)

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "neuronsim.pytest_plugin")  # the entry point when installed; explicit for a bare checkout


@pytest.fixture
def run(pytester, monkeypatch):
    """``run(*args, **environ)``: pytest in a subprocess, with the plugin and the Numba cache this
    process uses (pytester points HOME at its own directory, which would mean a cold compile)."""
    monkeypatch.setenv(env.NEURON_SIM_CACHE_DIR, str(cache_root()))
    for name in (env.NEURON_SIM, env.NEURON_SIM_CHIP):
        monkeypatch.delenv(name, raising=False)

    def go(*args, **environ):
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rA", *args, timeout=900)
        for name in environ:
            monkeypatch.delenv(name)
        return result

    return go


def _approx(row: dict) -> dict:
    return {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in row.items()}


def _failure(result, test: str) -> str:
    """The failure text pytest printed for ``test``."""
    out = result.stdout.str()
    start = out.index(f"_ {test} _")
    end = out.find("\n____", start + 1)
    return out[start:end if end > 0 else None]


def test_inert_unless_enabled(pytester, run):
    pytester.makepyfile(test_inert="""
        import sys
        import pytest

        def test_nothing_heavy_is_loaded():
            heavy = ("torch", "numba", "neuronsim.sim", "neuronsim.device", "neuronsim.testing",
                     "neuronsim.nki")
            assert [m for m in heavy if m in sys.modules] == []

        @pytest.mark.neuron_sim
        def test_marked():
            raise AssertionError("runs only under the simulator")

        def test_uses_a_fixture(neuron_perf):
            raise AssertionError("runs only under the simulator")
    """)
    result = run("--strict-markers")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_inert.py:*: needs the simulator: run pytest with "
                                 "--neuron-sim (or NEURON_SIM=1)",
                                 "SKIPPED [[]1[]] test_inert.py*: needs the simulator*"])
    assert not re.search(r"^neuronsim ", result.stdout.str(), re.M)  # no header line either
    help_text = run("--help").stdout.str()
    for name in (env.PYTEST_SIM_OPTION, env.PYTEST_CHIP_OPTION, env.PYTEST_UPDATE_BASELINES_OPTION,
                 env.PYTEST_PROFILE_DIR_OPTION, env.NEURON_SIM, env.NEURON_SIM_CHIP):
        assert name in help_text


ENABLED = """
    import os
    import torch

    def test_the_device_is_registered():
        x = torch.ones(4, device="neuron") * 2
        assert x.device.type == "neuron" and x.cpu().tolist() == [2.0] * 4
        assert os.environ["NEURON_SIM"] == "1"

    def test_nki_and_torch_neuronx_resolve_to_neuronsim():
        import nki
        import torch_neuronx
        assert nki.__name__ == "neuronsim.nki" and torch_neuronx.__name__ == "neuronsim.torch_neuronx"

    def test_the_chip():
        from neuronsim.options import current
        assert current().chip == os.environ["EXPECT_CHIP"] == torch.neuron.get_device_properties().chip
"""


def test_enabled_by_the_option_with_a_chip_before_conftest_imports_torch(pytester, run):
    pytester.makeconftest("import torch  # before the plugin's pytest_configure: the device must still come")
    pytester.makepyfile(test_enabled=ENABLED)
    result = run("--neuron-sim", "--neuron-chip", "trn3", EXPECT_CHIP="trn3")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["neuronsim *: emulated neuron device on trn3 (numerics exact); Numba*"])


def test_enabled_by_the_environment(pytester, run):
    pytester.makepyfile(test_enabled=ENABLED)
    run(EXPECT_CHIP="trn2", NEURON_SIM="1").assert_outcomes(passed=3)


def test_an_unknown_chip_is_a_usage_error(pytester, run):
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run("--neuron-sim", "--neuron-chip", "trn9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert re.search(r"--neuron-sim: .*trn9", result.stderr.str()), result.stderr.str()


FIXTURES_AND_GATES = r'''
    import json
    import numpy as np
    import pytest
    import torch
    import neuronsim.nki as nki
    import neuronsim.nki.language as nl

    @nki.jit
    def copy(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    A = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    X = torch.randn(64, 64)

    def native(device):
        return torch.relu(X.to(device) @ X.to(device))  # host copies and native kernels only

    def falls_back(device):
        return torch.cumsum(torch.ones(8, device=device), 0)

    def test_device(neuron_device):
        assert neuron_device == torch.device("neuron")

    def test_ops(neuron_device, neuron_ops):
        native(neuron_device)
        assert neuron_ops.fallback_ops == {} and "aten::mm" in neuron_ops.executed_ops
        neuron_ops.assert_no_fallback()
        falls_back(neuron_device)
        falls_back(neuron_device)
        assert neuron_ops.fallback_ops == {"aten::cumsum": 2}
        with pytest.raises(AssertionError, match=r"^1 op fell back to the host in this block on trn2 "
                                                 r"\(2 calls\): aten::cumsum x2\."):
            neuron_ops.assert_no_fallback()

    def test_profile(neuron_device, neuron_profile):
        x = torch.randn(32, 32).to("neuron")
        for _ in range(3):
            x = torch.tanh(x @ x)
        float(x.sum().cpu())
        with open("fixture_summary.json", "w") as f:
            json.dump(neuron_profile.summary, f)

    def test_no_fallback_passes(neuron_device, neuron_perf):
        with neuron_perf.no_host_fallback():
            native(neuron_device)

    def test_no_fallback_fails(neuron_device, neuron_perf):
        with neuron_perf.no_host_fallback():
            native(neuron_device)
            falls_back(neuron_device)

    def test_budget_passes(neuron_device, neuron_perf):
        with neuron_perf.time_budget(us=1000) as block:
            native(neuron_device)
        assert 0 < block.total_time_us < 1000

    def test_budget_fails(neuron_device, neuron_perf):
        with neuron_perf.time_budget(us=0.5):
            native(neuron_device)

    def test_bounds_pass(neuron_device, neuron_perf):
        with neuron_perf.bounds(tensor=(0.1, None), dma_bytes=(1, 1 << 20), hbm_write_bytes=(1, None)):
            native(neuron_device)

    def test_bounds_fail(neuron_device, neuron_perf):
        with neuron_perf.bounds(tensor=(99, None), hbm_read_bytes=(None, 16)):
            native(neuron_device)

    def test_kernel_passes(neuron_perf):
        out, profile = nki.simulate(copy, profile=True)(A)
        m = neuron_perf.check(profile, budget_us=100, bounds={"hbm_read_bytes": (A.nbytes, A.nbytes)})
        assert m.kernels == ("copy",)
        with neuron_perf.time_budget(us=100) as block:  # a launch inside a gated block counts too
            nki.simulate(copy)(A)
        assert block.kernels == ("copy",) and block.total_time == profile.summary["total_time"]

    def test_kernel_fails(neuron_perf):
        out, profile = nki.simulate(copy, profile=True)(A)
        neuron_perf.check(profile, budget_us=0.1, bounds={"dma": (None, 1)})

    def test_missing_baseline(neuron_device, neuron_perf):
        with neuron_perf.baseline("forward"):
            native(neuron_device)

    def test_a_failing_block_is_not_gated(neuron_device, neuron_perf):
        with pytest.raises(ZeroDivisionError):
            with neuron_perf.time_budget(us=0.001):
                native(neuron_device)
                1 / 0
'''

PROFILED_SCRIPT = """
import torch
x = torch.randn(32, 32).to("neuron")
for _ in range(3):
    x = torch.tanh(x @ x)
float(x.sum().cpu())
"""


def test_fixtures_and_each_gate(pytester, run):
    pytester.makepyfile(test_gates=FIXTURES_AND_GATES)
    result = run("--neuron-sim", "--neuron-profile-dir", "profiles")
    result.assert_outcomes(passed=8, failed=5)

    assert "1 op fell back to the host in this block on trn2 (1 call): aten::cumsum x1" in _failure(
        result, "test_no_fallback_fails")
    budget = _failure(result, "test_budget_fails")
    assert re.search(r"GateFailure: simulated device time of this block on trn2 is [\d.]+ us, over the "
                     r"budget of 0.5 us by [\d.]+%", budget)
    assert "slowest ops:" in budget and "aten::mm" in budget and "engines active: tensor" in budget
    bounds = _failure(result, "test_bounds_fail")
    assert re.search(r"tensor = [\d.]+% is below the lower bound 99.0%", bounds)
    assert re.search(r"hbm_read_bytes = [\d,]+ bytes is above the upper bound 16 bytes", bounds)
    kernel = _failure(result, "test_kernel_fails")
    assert re.search(r"simulated device time of copy on trn2 is [\d.]+ us, over the budget of 0.1 us", kernel)
    assert re.search(r"copy on trn2: dma = [\d.]+% is above the upper bound 1.0%", kernel)
    assert "copy: dma_copy (dma)" in kernel  # where the kernel's time went, by instruction
    missing = _failure(result, "test_missing_baseline")
    assert re.search(r"no baseline 'forward' for test_gates.py::test_missing_baseline on trn2 in \S+"
                     r"neuron_baselines.toml \(measured [\d.]+ us\). Record it with `pytest --neuron-sim "
                     r"--neuron-update-baselines test_gates.py::test_missing_baseline`", missing)
    assert not (pytester.path / "neuron_baselines.toml").exists()  # only the update flag writes it

    # neuron_profile's summary is the one `neuronsim profile` writes for the same code
    fixture = json.loads((pytester.path / "fixture_summary.json").read_text())
    script = pytester.path / "script.py"
    script.write_text(PROFILED_SCRIPT)
    cli = pytester.run("neuronsim", "profile", "-o", "cli", "--no-host-ops", str(script), timeout=900)
    assert cli.ret == 0, cli.stderr.str()
    profiled = json.loads((pytester.path / "cli" / "summary.json").read_text())
    # equal up to float rounding: the test's clock does not start at zero as the script's does
    assert {f: fixture[f] for f in FIELDS} == {f: pytest.approx(profiled[f], rel=1e-12) for f in FIELDS}
    assert [_approx(row) for row in profiled["ops"]] == fixture["ops"]
    assert fixture["fallback_ops"] == profiled["fallback_ops"] == {}
    written = pytester.path / "profiles" / "test_gates.py_test_profile"
    assert {p.name for p in written.iterdir()} == {"trace.json", "summary.json", "ops.csv"}
    assert json.loads((written / "summary.json").read_text())["total_time"] == fixture["total_time"]


BASELINED = """
    import os
    import torch

    def test_fixed(neuron_device, neuron_perf):
        x = torch.randn(64, 64, device=neuron_device)
        with neuron_perf.baseline("mm"):
            torch.relu(x @ x)

    def test_sized(neuron_device, neuron_perf):
        n = int(os.environ["SIZE"])
        x = torch.randn(n, n, device=neuron_device)
        with neuron_perf.baseline("mm", tolerance_pct=1):
            torch.relu(x @ x)
"""


def test_baselines_recorded_compared_and_updated(pytester, run):
    pytester.makepyfile(test_base=BASELINED)
    path = pytester.path / "neuron_baselines.toml"

    result = run("--neuron-sim", "--neuron-update-baselines", SIZE="64")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"neuronsim: wrote 2 baselines to {path} (2 new)",
                                 "  new: test_base.py::test_fixed 'mm' on trn2",
                                 "  new: test_base.py::test_sized 'mm' on trn2"])
    recorded = path.read_text()
    assert '["test_base.py::test_fixed".mm.trn2]' in recorded and '"aten::mm" = ' in recorded

    result = run("--neuron-sim", SIZE="128")
    result.assert_outcomes(passed=1, failed=1)
    failure = _failure(result, "test_sized")
    assert re.search(r"changed from the baseline 'mm': ([\d.]+) us -> ([\d.]+) us \(\+[\d.]+%; the gate asks "
                     r"for within 1%\)", failure)
    table = failure[failure.index("op or engine"):]
    assert re.search(r"\btotal\s+[\d.]+ us\s+[\d.]+ us\s+\+[\d.]+%", table)
    assert re.search(r"\bop aten::mm\s+[\d.]+ us\s+[\d.]+ us\s+\+[\d.]+%", table)
    assert re.search(r"\bHBM read\s+[\d,]+ B\s+[\d,]+ B\s+\+300.00%", table)  # 4x the bytes in
    hint = "update it with `pytest --neuron-sim --neuron-update-baselines test_base.py::test_sized`"
    assert hint in failure
    assert path.read_text() == recorded  # a failed comparison changes nothing

    result = run("--neuron-sim", "--neuron-update-baselines", SIZE="128")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"neuronsim: wrote 2 baselines to {path} (1 changed, 1 same)",
                                 "  changed: test_base.py::test_sized 'mm' on trn2"])
    updated = path.read_text()
    fixed = updated.split('["test_base.py::test_sized"')[0]
    assert fixed == recorded.split('["test_base.py::test_sized"')[0]  # the unchanged entry is kept as it was
    assert updated != recorded
    assert os.environ.get(env.NEURON_SIM) is None  # nothing leaked into this process
