"""A pytest plugin running aws-neuron/nki-library's own kernel tests on neuronsim.

The library's tests (``test/integration``) build each case with its ``UnitTestFramework``: inputs
from the test's generator, the golden outputs from the kernel's torch reference, tolerances, the
LNC degree; then hand it to the ``test_manager`` fixture (their ``Orchestrator``), which compiles
and runs on a Trainium host or, in ``--test-mode simulation``, on AWS's CPU simulator. This plugin
is that fixture for neuronsim: the kernel runs unchanged through ``nki.simulate`` (``import nki``
resolves to neuronsim) and its outputs are compared with the golden ones by the library's own
comparator (``maxAllClose``, as their ``OutputValidator`` calls it). Their ``conftest.py`` (hosts,
S3, metrics) is not loaded (``--noconftest``); the few third-party modules the tests import only
for that infrastructure are stand-ins that fail if called (``_stand_in``). One JSON line per test
case goes to ``--compat-out``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from neuronsim.nki.kernel import Kernel


def pytest_addoption(parser):
    parser.addoption("--compat-out", default=None, help="JSON-lines file for one result per test case")
    parser.addoption("--compat-chips", default="trn2,trn3", help="chips to time each case on")
    parser.addoption("--compat-repo", default=None, help="root of the nki-library checkout")
    parser.addoption("--compat-cases", type=int, default=0,
                     help="run only the first N cases of each test function (0: all)")
    parser.addoption("--compat-skip", default=None,
                     help="file of test ids already run (one per line): deselected, so a run resumes")


def _stand_in(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)

    def missing(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (_Unavailable,), {"__module__": name})

    mod.__getattr__ = missing
    return mod


class _Unavailable:
    """A class from test infrastructure neuronsim does not provide (metrics, S3, hosts): usable in
    annotations and as a base class, failing when something builds one."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__module__}.{type(self).__name__}: test infrastructure not "
                           "available under neuronsim's compat runner")


def _neuron_dtypes() -> types.ModuleType:
    """``neuron_dtypes`` (AWS's dtype helpers used by the torch references): ``neuron_dtypes.py``."""
    from neuronsim.nki.compat import neuron_dtypes

    return neuron_dtypes.module(_stand_in)


def _install_stand_ins() -> None:
    import importlib.util

    def absent(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            return True

    if absent("neuron_dtypes"):
        from neuronsim.nki.compat.neuron_dtypes import register_x4_names

        sys.modules["neuron_dtypes"] = _neuron_dtypes()
        register_x4_names()
    for name in ("aws_embedded_metrics", "aws_embedded_metrics.logger",
                 "aws_embedded_metrics.logger.metrics_context", "aws_embedded_metrics.serializers",
                 "aws_embedded_metrics.serializers.log_serializer", "allpairspy", "boto3", "fabric",
                 "fabric2", "pytest_html", "pytest_html.extras", "plotext", "filelock"):
        if absent(name.split(".")[0]):
            sys.modules[name] = _stand_in(name)
    orchestrator = _stand_in("test.utils.test_orchestrator", Orchestrator=CompatOrchestrator)
    sys.modules["test.utils.test_orchestrator"] = orchestrator


def pytest_generate_tests(metafunc):
    """``@pytest.mark.coverage_parametrize``: the cases the library's conftest generates, by its own
    generator (``test/utils/coverage_parametrized_tests.py``) at its default coverage (singles)."""
    from test.utils import ranged_test_harness as ranged

    if ranged.RANGE_TEST_FIXTURE_NAME in metafunc.fixturenames:  # @range_test_config: its harness's cases
        config = getattr(metafunc.function, ranged.RANGE_TEST_CONFIG_ATTR_KEY)
        extra = {}
        if hasattr(metafunc.function, ranged.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY):
            extra[ranged.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY] = getattr(
                metafunc.function, ranged.RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY)
        ids, configs = ranged.RangeTestHarness(config, **extra).get_unique_test_cases()
        metafunc.parametrize(ranged.RANGE_TEST_FIXTURE_NAME, configs, ids=ids)
        return
    marker = metafunc.definition.get_closest_marker("coverage_parametrize")
    if marker is None:
        return
    from test.utils.coverage_parametrized_tests import (
        extract_parametrize_args,
        generate_parametrized_test_case,
    )

    params = dict(marker.kwargs)
    coverage = params.pop("coverage", None) or "singles"
    knobs = ("enable_automatic_boundary_tests", "enable_invalid_combination_tests",
             "n_tests_per_boundary_value", "max_invalid_tests")
    options = {k: params.pop(k) for k in knobs if k in params}
    cases = generate_parametrized_test_case(params=params, coverage=coverage,
                                            filter_func=params.pop("filter", None), **options)
    names, values, ids = extract_parametrize_args(params, cases)
    metafunc.parametrize(names, values, ids=ids)


# AWS's simulation mode skips the cases whose ids name large shapes (test/utils/simulation_setup.py)
_LARGE_SHAPE_PATTERNS = ("4096", "5120", "8192", "16384", "32768", "36864")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="large shape: the library's simulation mode skips it too")
    for item in items:
        if item.get_closest_marker("slow_simulation") or any(p in item.name for p in _LARGE_SHAPE_PATTERNS):
            item.add_marker(skip)
    limit = config.getoption("--compat-cases")
    if limit:
        kept, dropped, seen = [], [], {}
        for item in items:
            key = (item.nodeid.split("::")[0], getattr(item, "originalname", item.name))
            large = any(m.name == "skip" for m in item.iter_markers())
            if not large and seen.get(key, 0) < limit:
                seen[key] = seen.get(key, 0) + 1
                kept.append(item)
            else:
                dropped.append(item)
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)
    skip_file = config.getoption("--compat-skip")
    if skip_file:
        with open(skip_file) as f:
            done = {line.strip() for line in f if line.strip()}
        dropped = [item for item in items if item.nodeid in done]
        items[:] = [item for item in items if item.nodeid not in done]
        config.hook.pytest_deselected(items=dropped)


def pytest_configure(config):
    for mark in ("fast", "simulation", "slow_simulation", "coverage_parametrize", "platforms",
                 "trace_only", "compile_only", "compile_and_infer"):
        config.addinivalue_line("markers", f"{mark}: nki-library marker")
    os.environ.setdefault("NEURON_SIM", "1")
    from neuronsim.nki_alias import install_alias

    install_alias(force=True)
    repo = config.getoption("--compat-repo")
    if repo:
        for p in (os.path.join(repo, "src"), repo):
            if p not in sys.path:
                sys.path.insert(0, p)
        sys.modules.pop("test", None)  # the stdlib's regression-test package, if something loaded it
    _install_stand_ins()
    config._compat = _Recorder(config.getoption("--compat-out"),
                               [c for c in config.getoption("--compat-chips").split(",") if c])


class _Recorder:
    def __init__(self, path: str | None, chips: list[str]):
        self.path, self.chips = path, chips
        self.seen: set[str] = set()
        self.pending: dict[str, list[dict]] = {}

    def hold(self, row: dict) -> None:
        """Keep a case's row until its test's outcome is known (a negative test passes when the
        kernel rejects its inputs)."""
        self.pending.setdefault(row["test"], []).append(row)

    def settle(self, nodeid: str, passed: bool) -> None:
        for row in self.pending.pop(nodeid, []):
            if passed and not row["correct"]:
                row.update(correct=True, expected_failure=True,
                           error=f"negative test (the kernel rejects these inputs, as expected): "
                                 f"{row['error']}")
            self.write(row)

    def write(self, row: dict) -> None:
        self.seen.add(row["test"])
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


_RECORDER: _Recorder | None = None


class CompatOrchestrator:
    """The library's ``Orchestrator`` for neuronsim: ``execute(kernel_args)`` simulates and validates."""

    trace_mode = None

    def __init__(self, recorder: _Recorder | None = None, nodeid: str = "", chips: list[str] | None = None):
        self.recorder, self.nodeid = recorder, nodeid
        self.chips = chips or (self.recorder.chips if self.recorder else ["trn2"])

    def execute(self, kernel_args) -> None:
        row = run_case(kernel_args, self.chips)
        row["test"] = self.nodeid
        if self.recorder:
            self.recorder.hold(row)
        if not row["ran"]:
            raise AssertionError(f"kernel did not run: {row['error']}")
        if not row["correct"]:
            raise AssertionError(f"kernel output does not match the reference: {row['error']}")


def _test_chips(request) -> list[str]:
    """The runner's chips the test supports: its ``@pytest.mark.platforms(exclude=[...])`` (the
    library's MX tests exclude TRN1/TRN2, as its conftest applies the marker)."""
    chips = request.config._compat.chips if request.config._compat else ["trn2"]
    marker = request.node.get_closest_marker("platforms")
    excluded = {getattr(p, "value", p) for p in (marker.kwargs.get("exclude") or [])} if marker else set()
    return [c for c in chips if c not in excluded] or [c for c in ("trn2", "trn3") if c not in excluded][:1]


@pytest.fixture
def test_manager(request):
    return CompatOrchestrator(request.config._compat, request.node.nodeid, _test_chips(request))


@pytest.fixture
def platform_target(request):
    from test.utils.common_dataclasses import Platforms

    return Platforms(_test_chips(request)[0])


@pytest.fixture
def collector():
    from test.utils.metrics_collector import NoopMetricsCollector

    return NoopMetricsCollector()


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:300]


def _kernel_name(fn) -> str:
    fn = getattr(fn, "fn", fn)
    module = getattr(fn, "__module__", "?").removeprefix("nkilib_src.nkilib.")
    return f"{module}.{getattr(fn, '__name__', '?')}"


def run_case(kernel_args, chips: list[str]) -> dict:
    """Simulate one test case on each chip; compare the first chip's outputs with the golden ones.
    A case with ``collective_ranks`` > 1 runs as a collective launch (``simulate_ranks``), each rank
    with its own inputs (``PerRankLazyInputGenerator``), and every rank's outputs are checked.

    Memory a kernel never writes starts as NaN bytes (the simulator's default, as AWS's simulator
    fills it). The library's tests are run on Trainium hosts, and some compare such bytes with zeros
    (scale rows ``quantize_mx`` leaves alone, output rows no instruction writes): a case whose
    outputs differ is run again with that memory zeroed, and counts as correct with a note if it
    then matches (``uninitialized``)."""
    from neuronsim.nki.kernel import as_kernel
    from neuronsim.options import current, options

    kernel = kernel_args.kernel_func
    lnc = getattr(kernel_args.compiler_input, "logical_nc_config", None) or 1
    row = {"kernel": _kernel_name(kernel), "ran": False, "correct": False, "max_error": None, "error": ""}
    # a test's plain wrapper function (moe_cte_kernel_wrapper) is a kernel too, launched at its LNC
    launch = as_kernel(kernel)[lnc] if lnc > 1 else as_kernel(kernel)  # one Kernel: its trace is cached
    outputs = None
    for chip in chips:
        t0 = time.perf_counter()
        try:
            result, seconds = _launch(kernel_args, launch, chip)
        except Exception as exc:  # the table's "first error": any failure of the kernel's run
            row["error"] = _first_line(exc)
            row["where"] = _kernel_frame(exc)
            return row
        row[f"{chip}_s"] = seconds
        row[f"{chip}_wall_s"] = time.perf_counter() - t0
        if outputs is None:
            outputs = result
    row["ran"] = True
    row.update(_check(kernel_args, outputs))
    if not row["correct"] and "max |error|" in row["error"] and current().uninitialized_memory == "nan":
        with options(uninitialized_memory="zero"):
            try:
                again = _check(kernel_args, _launch(kernel_args, launch, chips[0])[0])
            except Exception:
                again = {"correct": False}
        if again["correct"]:
            row.update(correct=True, max_error=again.get("max_error"), uninitialized=True,
                       error="matches when memory it never writes reads as zero, as the test expects "
                             f"of a Trainium host; with the simulator's NaN fill: {row['error']}")
    return row


def _launch(kernel_args, launch: Kernel, chip: str) -> tuple[list, float]:
    """The case's outputs (a list: one entry per rank) and simulated time on ``chip``."""
    from neuronsim.nki import simulate, simulate_ranks

    ranks = int(getattr(kernel_args.inference_args, "collective_ranks", 1) or 1)
    if ranks == 1:
        inputs = _rank_inputs(kernel_args.kernel_input, 0, copy=False)
        written = _written_arguments(launch, inputs, chip)
        inputs = {k: v.copy() if k in written and isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        result, prof = simulate(launch, profile=True, chip=chip)(**inputs)
        return [result], prof.summary["total_time"]
    per_rank = [_rank_inputs(kernel_args.kernel_input, r) for r in range(ranks)]
    result, profs = simulate_ranks(launch, ranks, profile=True, chip=chip)(per_rank)
    return result, max(p.summary["total_time"] for p in profs)


def _check(kernel_args, outputs) -> dict:
    """Every checked rank's outputs against its golden: correct, max_error, error."""
    try:
        # one golden for a collective case is rank 0's, as the library's OutputValidator reads it
        per_rank = hasattr(getattr(kernel_args.validation_args, "golden_output", None), "for_rank")
        checked = outputs if per_rank else outputs[:1]
        checks = [_validate(kernel_args, out, rank) for rank, out in enumerate(checked)]
    except Exception as exc:
        return {"correct": False, "max_error": None, "error": "validation: " + _first_line(exc)}
    out = dict(checks[0])
    if len(checks) > 1:
        bad = [f"rank {r}: {c['error']}" for r, c in enumerate(checks) if not c["correct"]]
        errors = [c["max_error"] for c in checks if c.get("max_error") is not None]
        out.update(correct=not bad, error="; ".join(bad) or checks[0]["error"],
                   max_error=max(errors) if errors else None)
    return out


def _rank_inputs(given, rank: int, copy: bool = True) -> dict:
    """A rank's keyword arguments (with ``copy``, copies of the arrays: a kernel may write them)."""
    if hasattr(given, "for_rank"):
        given = given.for_rank(rank)
    inputs = {k.removesuffix(".must_alias_input"): v for k, v in (given or {}).items()}
    return {k: (v.copy() if copy and isinstance(v, np.ndarray) else v) for k, v in inputs.items()}


def _written_arguments(launch: Kernel, inputs: dict, chip: str) -> set[str]:
    """The array arguments the kernel writes (its trace, cached for the run that follows): only
    those are copied, so the test's inputs stay as they were for the next chip and the golden
    without holding a second copy of inputs it only reads (cross_entropy's are 4 GiB)."""
    traced = launch.specialize((), inputs, chip=chip)
    return {t.name for inst in traced.instances for p in inst.programs for t in p.hbm_tensors()
            if t.kind == "inout"}


def _kernel_frame(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        if "nkilib_src" in fr.filename:
            return f"{os.path.basename(fr.filename)}:{fr.lineno}"
    return ""


def _validate(kernel_args, outputs, rank: int = 0) -> dict:
    """Outputs by position against the golden ones by name (as the library's simulation mode pairs
    them), compared the way its ``OutputValidator`` does: both as float32 through ``maxAllClose``,
    or with the test's own ``CustomValidator``."""
    from test.integration.nkilib.utils.comparators import maxAllClose
    from test.utils.common_dataclasses import (
        CustomValidatorWithOutputTensorData,
        LazyGoldenGenerator,
        normalize_golden_output,
    )

    va = kernel_args.validation_args
    if va is None:
        return {"correct": False, "error": "the test gives no golden output"}
    placeholders = normalize_golden_output(va.golden_output, rank)
    names = list(placeholders.keys())
    golden = va.golden_output.golden if isinstance(va.golden_output, LazyGoldenGenerator) else \
        normalize_golden_output(va.golden_output, rank)
    if golden is None:  # the test disables validation (lazy_golden_generator=None): it checks its run
        return {"correct": True, "error": "the test compares no outputs (its kernel ran)"}
    outs = [] if outputs is None else list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if len(outs) != len(names):
        return {"correct": False, "error": f"kernel returned {len(outs)} outputs, the reference {len(names)}"}
    worst, ok, bad = 0.0, True, []
    for name, got in zip(names, outs, strict=True):
        if name not in golden:  # as the library's validator: only the outputs with a golden are checked
            continue
        want = golden[name]
        if isinstance(want, CustomValidatorWithOutputTensorData):
            if not want.validator(None).validate(np.asarray(got, dtype=want.dtype)):
                ok = False
                bad.append(f"{name}: the test's validator rejects it")
            continue
        a, b = _as_float32(_as_read(got, placeholders[name], want)), _as_float32(want)
        if a.shape != b.shape:
            ok = False
            bad.append(f"{name}: shape {a.shape} vs reference {b.shape}")
            continue
        err, broken = differences(a, b)
        worst = max(worst, float("inf") if broken else err)
        if not maxAllClose(a, b, va.relative_accuracy, va.absolute_accuracy, verbose=0):
            ok = False
            nonfinite = f", {broken} NaN/Inf where the reference is finite" if broken else ""
            bad.append(f"{name}: max |error| {err:.3g}{nonfinite} (rtol {va.relative_accuracy}, "
                       f"atol {va.absolute_accuracy})")
    return {"correct": ok, "max_error": worst, "error": "; ".join(bad)}


def differences(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """The largest ``|got - want|`` where both are finite, and how many outputs are NaN or Inf
    where the reference is finite: an output that is all NaN has no finite error to report, and
    must not read as "max error 0"."""
    finite = np.isfinite(want)
    both = finite & np.isfinite(got)
    err = float(np.abs(got - want)[both].max()) if both.any() else 0.0
    return err, int(np.count_nonzero(finite & ~np.isfinite(got)))


def _as_read(got, placeholder, want) -> np.ndarray:
    """An output as the library's validator reads it on a Trainium host: its bytes as the dtype of
    the test's output placeholder (or of the golden), in the golden's shape (``np.fromfile(...,
    dtype).reshape(golden.shape)``). Outputs whose element size differs are left to the value
    comparison."""
    a = np.asarray(got)
    like = getattr(placeholder, "dtype", None) or getattr(want, "dtype", None)
    if like is not None and a.dtype != like and a.dtype.itemsize == like.itemsize:
        a = np.ascontiguousarray(a).view(like)
    shape = getattr(want, "shape", None)
    return a.reshape(shape) if shape is not None and a.size == int(np.prod(shape)) else a


def _as_float32(x) -> np.ndarray:
    """An output or golden as float32 for the comparison; packed MX x4 words are unpacked by the
    library's own unpackers, as its ``OutputValidator`` does with arrays that cannot be cast."""
    from neuronsim.nki.compat.neuron_dtypes import unpack_x4
    from neuronsim.nki.types import host_mx_name

    x = np.asarray(x)
    name = host_mx_name(x.dtype)
    if name is None or name == "float8_e8m0fnu":
        return x.astype(np.float32)
    try:
        from test.utils.output_validator import _X4_UNPACKERS
    except ImportError:  # outside the library (neuronsim's own tests): the stand-in's unpacking
        return unpack_x4(x, name)
    return _X4_UNPACKERS[name](x).numpy().astype(np.float32)


def pytest_runtest_logstart(nodeid, location):
    """A start marker per case: if the process dies in it (the host's OOM killer, a signal), the
    runner records that case as failed and resumes after it."""
    cfg = _CONFIG[0] if _CONFIG else None
    if cfg is not None and cfg._compat.path:
        with open(cfg._compat.path, "a") as f:
            f.write(json.dumps({"started": nodeid}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rec: _Recorder = item.config._compat
    if rep.when == "call":
        rec.settle(item.nodeid, rep.passed)
    if rep.skipped:
        return
    if rep.failed and item.nodeid not in rec.seen:
        msg = ""
        if call.excinfo is not None:
            msg = _first_line(call.excinfo.value)
        rec.write({"test": item.nodeid, "kernel": item.module.__name__.rsplit(".", 1)[-1], "ran": False,
                   "correct": False, "max_error": None, "error": f"before the kernel ran: {msg}"})


def pytest_collectreport(report):
    if report.failed:
        msg = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""
        cfg = _CONFIG[0] if _CONFIG else None
        if cfg is not None:
            cfg._compat.write({"test": report.nodeid, "kernel": report.nodeid.rsplit("/", 1)[-1],
                               "ran": False, "correct": False, "max_error": None,
                               "error": f"collection: {msg}"})


_CONFIG: list = []


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    _CONFIG.append(session.config)
