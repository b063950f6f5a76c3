"""The example package's performance gates never flake: three runs in three processes measure the
same figures bit for bit, and they are the figures committed in its baseline file (when neuronsim's
timing changes on purpose, this fails with the diff until the file is updated:
``cd examples/kernelpack && pytest --neuron-sim --neuron-update-baselines``)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from neuronsim import env
from neuronsim.sim._numba_cache import cache_root
from neuronsim.testing import BaselineStore, diff_table

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kernelpack"
BASELINES = EXAMPLE / "tests" / env.PYTEST_BASELINE_FILE


def _measure(tmp_path: Path, run: int) -> Path:
    """Run the package's tests with --neuron-update-baselines in a copy; return the file written."""
    project = tmp_path / f"run{run}"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (project / "tests" / env.PYTEST_BASELINE_FILE).unlink()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_SIM")}
    environ[env.NEURON_SIM_CACHE_DIR] = str(cache_root())
    command = [sys.executable, "-m", "pytest", "-p", "neuronsim.pytest_plugin", "-p", "no:cacheprovider",
               "--neuron-sim", "--neuron-update-baselines"]
    proc = subprocess.run(command, cwd=project, env=environ, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return project / "tests" / env.PYTEST_BASELINE_FILE


def _diffs(committed: BaselineStore, measured: BaselineStore) -> str:
    out = []
    for test, names in measured.entries.items():
        for name, chips in names.items():
            for chip, record in chips.items():
                old = committed.get(test, name, chip)
                if old != record:
                    table = diff_table(old or {}, record, all_rows=old is None)
                    out.append(f"{test} {name!r} on {chip}:\n{table}")
    gone = [t for t in committed.entries if t not in measured.entries]
    return "\n\n".join(out + ([f"no longer measured: {gone}"] if gone else []))


def test_three_runs_measure_the_same_figures_bit_for_bit_and_the_committed_ones(tmp_path):
    files = [_measure(tmp_path, run) for run in range(3)]
    texts = [f.read_text() for f in files]
    assert texts[0] == texts[1] == texts[2]
    differences = _diffs(BaselineStore(BASELINES), BaselineStore(files[0]))
    update = "cd examples/kernelpack && pytest --neuron-sim --neuron-update-baselines"
    assert not differences, (f"{BASELINES} is out of date (update it with `{update}` if the change is "
                             f"intended):\n{differences}")
    assert texts[0] == BASELINES.read_text()
