"""neuronsim's pytest plugin: the emulated device and deterministic performance gates in tests.

Installed with the package (the ``pytest11`` entry point) and inert unless used: loading it
imports only this file and ``neuronsim.env`` — no torch, Numba or simulator — until the simulator
is enabled with ``--neuron-sim`` (or ``NEURON_SIM=1``). Then it sets the environment a script run
by ``neuronsim run`` gets (``NEURON_SIM=1``, the chip of ``--neuron-chip``, ``import nki`` and
``import torch_neuronx`` served by neuronsim) before any conftest imports torch, registers the
``neuron`` device, and gives tests:

- ``neuron_device``: ``torch.device("neuron")``;
- ``neuron_ops``: a fresh op-tracking scope (:class:`neuronsim.testing.OpScope`);
- ``neuron_profile``: a profile of the test — ``neuron_profile.summary`` is the summary
  ``neuronsim profile`` prints (``--neuron-profile-dir DIR`` also writes each test's profile there);
- ``neuron_perf``: performance gates (:class:`neuronsim.testing.Gates`) with the baselines in
  ``neuron_baselines.toml`` next to the test file, rewritten only by ``--neuron-update-baselines``;
- ``@pytest.mark.neuron_sim``: run the test only under the simulator.

Without the simulator the fixtures and the marker skip the test, saying how to enable it.
"""

from __future__ import annotations

import os
import re

import pytest

from neuronsim import env

_ENABLED = pytest.StashKey[bool]()
_STORES = pytest.StashKey[dict]()
_SAVED_ENV = pytest.StashKey[dict]()
NEEDS_SIM = f"needs the simulator: run pytest with {env.PYTEST_SIM_OPTION} (or {env.NEURON_SIM}=1)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronsim", "neuronsim: the simulated Trainium NeuronCore")
    group.addoption(
        env.PYTEST_SIM_OPTION, action="store_true", default=False, dest="neuron_sim",
        help=f"Enable the emulated `neuron` device for the session, as {env.NEURON_SIM}=1 does (setting "
             f"{env.NEURON_SIM}=1 in the environment enables it too).")
    group.addoption(
        env.PYTEST_CHIP_OPTION, default=None, dest="neuron_chip", metavar="trn2|trn3|FILE.toml",
        help=f"Chip to simulate; sets {env.NEURON_SIM_CHIP} for the session (default: "
             f"{env.NEURON_SIM_CHIP} from the environment, else trn2).")
    group.addoption(
        env.PYTEST_UPDATE_BASELINES_OPTION, action="store_true", default=False,
        dest="neuron_update_baselines",
        help=f"Rewrite the performance baselines ({env.PYTEST_BASELINE_FILE} next to each test file) with "
             f"what the tests measure, instead of checking against them.")
    group.addoption(
        env.PYTEST_PROFILE_DIR_OPTION, default=None, dest="neuron_profile_dir", metavar="DIR",
        help="Write the profile of each test using the neuron_profile fixture to DIR/<test>/ "
             "(trace.json, summary.json, ops.csv, as `neuronsim profile` writes them).")


def _requested(options) -> bool:
    return bool(getattr(options, "neuron_sim", False)) or os.environ.get(env.NEURON_SIM, "").strip() == "1"


def _set(saved: dict, name: str, value: str) -> None:
    saved.setdefault(name, os.environ.get(name))
    os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser, args) -> None:
    """Set the environment before conftest files run: one that imports torch then gets the device."""
    options = early_config.known_args_namespace
    saved = early_config.stash.setdefault(_SAVED_ENV, {})
    if getattr(options, "neuron_chip", None):
        _set(saved, env.NEURON_SIM_CHIP, options.neuron_chip)
    if _requested(options):
        _set(saved, env.NEURON_SIM, "1")
        from neuronsim.nki_alias import install_alias, install_torch_neuronx_alias

        # `import nki` / `import torch_neuronx` in kernel files, tests and conftests resolve to
        # neuronsim (unless the real package is installed), as under `neuronsim run`
        install_alias()
        install_torch_neuronx_alias()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{env.PYTEST_MARKER}: run the test only under the simulator ({env.PYTEST_SIM_OPTION} "
                   f"or {env.NEURON_SIM}=1); skipped otherwise")
    enabled = _requested(config.option)
    config.stash[_ENABLED] = enabled
    config.stash[_STORES] = {}
    if config.option.neuron_update_baselines and hasattr(config, "workerinput"):
        raise pytest.UsageError(f"{env.PYTEST_UPDATE_BASELINES_OPTION} cannot run in parallel workers "
                                f"(pytest-xdist): each would rewrite the baseline files; run it without -n")
    if not enabled:
        return
    saved = config.stash.setdefault(_SAVED_ENV, {})
    _set(saved, env.NEURON_SIM, "1")  # when configured without the early hook (pytester in-process)
    if config.option.neuron_chip:
        _set(saved, env.NEURON_SIM_CHIP, config.option.neuron_chip)
    from neuronsim.errors import NeuronSimError

    try:
        from neuronsim.options import reload_environment
        from neuronsim.sim.chips import get_chip

        get_chip(reload_environment().chip)
        import neuronsim

        neuronsim.enable()
    except NeuronSimError as exc:
        raise pytest.UsageError(f"{env.PYTEST_SIM_OPTION}: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in config.stash.get(_SAVED_ENV, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not config.stash.get(_ENABLED, False):
        return None
    import neuronsim
    from neuronsim.options import current
    from neuronsim.sim._numba_cache import cache_dir

    opts = current()
    update = ", updating baselines" if config.option.neuron_update_baselines else ""
    return [f"neuronsim {neuronsim.__version__}: emulated neuron device on {opts.chip} "
            f"(numerics {opts.numerics}){update}; Numba cache {cache_dir()}"]


FIXTURES = ("neuron_device", "neuron_ops", "neuron_profile", "neuron_perf")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the simulator, skip marked tests and those using the fixtures (at their own line)."""
    if config.stash.get(_ENABLED, False):
        return
    skip = pytest.mark.skip(reason=NEEDS_SIM)
    for item in items:
        uses = set(getattr(item, "fixturenames", ())) & set(FIXTURES)
        if item.get_closest_marker(env.PYTEST_MARKER) or uses:
            item.add_marker(skip)


def _require_sim(request: pytest.FixtureRequest) -> None:
    if not request.config.stash.get(_ENABLED, False):
        pytest.skip(NEEDS_SIM)


@pytest.fixture
def neuron_device(request: pytest.FixtureRequest):
    """``torch.device("neuron")``: the emulated device (the test skips without the simulator)."""
    _require_sim(request)
    import torch

    import neuronsim

    neuronsim.enable()
    return torch.device("neuron")


@pytest.fixture
def neuron_ops(request: pytest.FixtureRequest):
    """A fresh op-tracking scope: ``.fallback_ops``, ``.executed_ops``, ``.assert_no_fallback()``."""
    _require_sim(request)
    from neuronsim.testing import OpScope

    return OpScope()


@pytest.fixture
def neuron_profile(request: pytest.FixtureRequest):
    """A profile of the test: ``neuron_profile.summary`` is the summary `neuronsim profile` would
    print for the test's device ops and NKI launches so far (``.fallback_ops``, ``.total_time_us``,
    ``.write(dir)`` too)."""
    _require_sim(request)
    from neuronsim.testing import Block

    block = Block().start()
    try:
        yield block
    finally:
        block.stop()
        out = request.config.option.neuron_profile_dir
        if out:
            block.write(os.path.join(out, _safe_name(request.node.nodeid)))


@pytest.fixture
def neuron_perf(request: pytest.FixtureRequest):
    """Performance gates for this test (:class:`neuronsim.testing.Gates`): ``no_host_fallback()``,
    ``time_budget(us=)``, ``baseline(name, tolerance_pct=)``, ``bounds(**)``, ``gate(...)`` as
    context managers over a block, ``check(profile, ...)`` for an ``nki.simulate`` profile."""
    _require_sim(request)
    from neuronsim.testing import Gates

    store, test = _store_for(request.node)
    hint = f"`pytest {env.PYTEST_SIM_OPTION} {env.PYTEST_UPDATE_BASELINES_OPTION} {request.node.nodeid}`"
    return Gates(store, test, update=request.config.option.neuron_update_baselines, update_hint=hint)


def _store_for(item: pytest.Item):
    """The baseline store next to the item's file, and the item's id in it (file name::test)."""
    from neuronsim.testing import BaselineStore

    path = item.path.parent / env.PYTEST_BASELINE_FILE
    stores = item.config.stash[_STORES]
    if path not in stores:
        stores[path] = BaselineStore(path)
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return stores[path], f"{item.path.name}::{rest}"


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", nodeid).strip("_")


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.option.neuron_update_baselines:
        return
    for store in config.stash.get(_STORES, {}).values():
        if store.updated:
            store.save()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if not config.option.neuron_update_baselines:
        return
    for path, store in sorted(config.stash.get(_STORES, {}).items()):
        if not store.updated:
            continue
        states = list(store.updated.values())
        counts = ", ".join(f"{states.count(s)} {s}" for s in ("new", "changed", "same") if states.count(s))
        terminalreporter.write_line(f"neuronsim: wrote {len(states)} baselines to {path} ({counts})")
        for (test, name, chip), state in sorted(store.updated.items()):
            if state != "same":
                terminalreporter.write_line(f"  {state}: {test} {name!r} on {chip}")
