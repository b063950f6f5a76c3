"""The CI recipe of docs/ci.md: the shell variant runs here against the example package
(examples/kernelpack) — the cache archive is saved, restored into an empty cache directory and used
there (nothing compiled), and the package's performance tests pass — and the files docs/ci.md shows
are the files in docs/ci/."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuronsim import env
from neuronsim.sim._numba_cache import cache_root

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "docs" / "ci" / "neuron-tests.sh"
WORKFLOW = REPO / "docs" / "ci" / "neuron-tests.yml"
EXAMPLE = REPO / "examples" / "kernelpack"
BIN = Path(sys.executable).parent


def test_the_doc_shows_the_recipe_files_as_they_are():
    doc = (REPO / "docs" / "ci.md").read_text()
    assert f"```bash\n{RECIPE.read_text()}```" in doc
    assert f"```yaml\n{WORKFLOW.read_text()}```" in doc


def _recipe(project: Path, store: Path, numba_cache: Path, *pytest_args: str):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_SIM")}
    environ.update({"NEURONSIM_INSTALL": "",  # installed already: this test's environment
                    "NEURONSIM_CACHE_STORE": str(store), env.NEURON_SIM_CACHE_DIR: str(numba_cache),
                    "PATH": f"{BIN}{os.pathsep}{environ.get('PATH', '')}"})
    # -p names the plugin in case this environment was installed before its entry point existed
    pytest_args = ("-p", "neuronsim.pytest_plugin", "-p", "no:cacheprovider", *pytest_args)
    return subprocess.run(["bash", str(RECIPE), *pytest_args], cwd=project, env=environ, capture_output=True,
                          text=True, timeout=1800)


@pytest.mark.skipif(shutil.which("neuronsim", path=str(BIN)) is None or shutil.which("tar") is None,
                    reason="needs the neuronsim console script (pip install) and tar")
def test_the_shell_recipe_saves_restores_and_uses_the_cache_then_runs_the_gates(tmp_path):
    project = tmp_path / "kernelpack"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    store = tmp_path / "store"

    # a first CI run: this machine's cache (warm), saved to the store; pytest only collects
    first = _recipe(project, store, cache_root(), "--collect-only", "-q")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "neuron-tests: saved the Numba cache to" in first.stdout
    archives = list(store.glob("neuronsim-*.tar.gz"))
    assert len(archives) == 1 and "4 tests collected" in first.stdout

    # a later CI run on a fresh machine: an empty cache, restored from the store and used as is
    second = _recipe(project, store, tmp_path / "fresh-cache")
    output = second.stdout + second.stderr
    assert f"neuron-tests: restored the Numba cache from {archives[0]}" in second.stdout, output[-3000:]
    assert "compiled" not in second.stdout.split("Numba cache:")[0], output[-3000:]
    assert second.returncode == 0, output[-6000:]
    assert "4 passed" in second.stdout
