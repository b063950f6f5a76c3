"""``neuronsim warmup``: fills the Numba cache where NEURON_SIM_CACHE_DIR says (and builds the device's
C++ library there), says where and how long; ``--cache-key`` names this install for CI caches.
(Restoring a saved cache into a fresh directory is tested with the CI recipe,
tests/testing/test_ci_recipe.py.)"""

import json
import sys
from pathlib import Path

from cli_helpers import neuronsim
from click.testing import CliRunner

import neuronsim as package
from neuronsim import env
from neuronsim.cli import main
from neuronsim.sim._numba_cache import cache_dir, cache_root, sources_hash
from neuronsim.sim.warmup import UNITS, warm_all


def test_help_names_the_cache_variable():
    out = neuronsim("warmup", "--help").stdout
    assert env.NEURON_SIM_CACHE_DIR in out and "--cache-key" in out


def _invoke(*args):
    """In this process, through click's runner (the simulator is loaded and compiled here already)."""
    result = CliRunner().invoke(main.neuronsim, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_warmup_says_where_and_how_long():
    lines = _invoke("warmup").splitlines()
    for unit, line in zip(UNITS, lines, strict=False):
        assert line.split()[0] == unit.name
        assert line.split()[2] == "s" and any(w in line for w in ("compiled", "loaded", "nothing more"))
    assert f"Numba cache: {cache_dir()}" in lines
    assert lines[-1].startswith("warmup took ") and lines[-1].endswith(" s")


def test_after_a_warmup_nothing_is_compiled_again():
    warm_all()  # in this process: compiles into the cache if it is cold
    result = neuronsim("warmup", "--json", env={env.NEURON_SIM_CACHE_DIR: str(cache_root())})
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["cache_dir"] == str(cache_dir()) and doc["seconds"] > 0
    assert [u["unit"] for u in doc["units"]] == [u.name for u in UNITS]
    # another process finds every unit's code in the cache
    assert sum(u["compiled"] for u in doc["units"]) == 0, doc
    # and the device's C++ library is in the same root, so a NEURON_SIM=1 start builds nothing either
    library = Path(doc["device_library"]["path"])
    assert library.parent == cache_root() and library.is_file(), doc


def test_cache_key_names_the_version_the_simulator_sources_and_python():
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = f"neuronsim-{package.__version__}-{sources_hash()}-{python}"
    assert _invoke("warmup", "--cache-key").strip() == key
