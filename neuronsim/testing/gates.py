"""Performance gates: one-line assertions on simulated device time, engines, traffic and fallbacks.

Each gate checks a :class:`~neuronsim.testing.measure.Measurement` (a measured block, or an
``nki.simulate(..., profile=True)`` profile) and raises ``neuronsim.errors.GateFailure`` (an
AssertionError)
with a message that says what was expected, what was measured and where the time went:

- ``no_fallback``: no op fell back to the host (names the ops that did, with their call counts);
- ``budget_us``: simulated device time at most this many microseconds;
- ``baseline`` (+ ``tolerance_pct``): device time within that many percent of the stored baseline,
  with a diff table (op or engine, before, after, change) when not;
- ``bounds``: any summary figure within ``(low, high)`` — engine names (``tensor``, ``vector``,
  ``scalar``, ``gpsimd``, ``sync``, ``dma``) mean active-time percent, ``mfu`` the estimated MFU
  percent, ``dma_bytes`` / ``hbm_read_bytes`` / ``hbm_write_bytes`` / ``hbm_bytes`` the traffic; any
  other key is a summary field name (``dma_transfer_count``, ``sbuf_peak_bytes``, ...).

:class:`Gates` binds them to a baseline store and a test (the pytest plugin's ``neuron_perf``
fixture is one); each gate is a context manager over a block or a :meth:`Gates.check` on a profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from neuronsim.errors import GateFailure, InputError
from neuronsim.testing.baselines import BaselineStore, diff_table
from neuronsim.testing.measure import Block, Measurement, from_profile

ENGINE_FIELDS = {
    **{e: f"{e}_engine_active_time_percent" for e in ("tensor", "vector", "scalar", "gpsimd", "sync")},
    "dma": "dma_active_time_percent",
}
BOUND_ALIASES = {
    **ENGINE_FIELDS,
    "mfu": "mfu_estimated_percent",
    "dma_bytes": "dma_transfer_total_bytes",
}
TOP_OPS = 5


@dataclass(frozen=True)
class GateSpec:
    """What a gated block must satisfy (every field optional)."""

    no_fallback: bool = False
    budget_us: float | None = None
    baseline: str | None = None
    tolerance_pct: float = 0.0
    bounds: Mapping[str, tuple] | None = None

    def __post_init__(self) -> None:
        budget = self.budget_us
        if budget is not None and not (isinstance(budget, (int, float)) and budget > 0):
            raise InputError(f"budget_us={budget!r}: a time budget is a positive number of microseconds")
        if not isinstance(self.tolerance_pct, (int, float)) or self.tolerance_pct < 0:
            raise InputError(f"tolerance_pct={self.tolerance_pct!r}: a tolerance is a percentage >= 0")
        if self.baseline is not None and (not isinstance(self.baseline, str) or not self.baseline):
            raise InputError(f"baseline={self.baseline!r}: a baseline is named by a non-empty string")
        for key, bound in (self.bounds or {}).items():
            _field_of(key)
            if not (isinstance(bound, tuple) and len(bound) == 2
                    and all(b is None or isinstance(b, (int, float)) for b in bound)):
                raise InputError(f"bound {key}={bound!r}: give (low, high), None for an open side")


def _field_of(key: str) -> str:
    from neuronsim.profiler.summary import FIELDS

    if key == "hbm_bytes" or key in FIELDS:
        return key
    if key in BOUND_ALIASES:
        return BOUND_ALIASES[key]
    raise InputError(f"unknown bound {key!r}: use an engine ({', '.join(ENGINE_FIELDS)}), mfu, dma_bytes, "
                     f"hbm_bytes, hbm_read_bytes, hbm_write_bytes or a summary field name")


def _value(m: Measurement, key: str) -> float:
    if key == "hbm_bytes":
        return m.summary.get("hbm_read_bytes", 0) + m.summary.get("hbm_write_bytes", 0)
    return m.summary.get(_field_of(key), 0)


def _fmt_value(key: str, value: float) -> str:
    field = _field_of(key)
    if field.endswith("percent"):
        return f"{value:.1f}%"
    if field.endswith("bytes"):
        return f"{int(value):,} bytes"
    if field in ("total_time",) or field.endswith("_time"):
        return f"{value * 1e6:.3f} us"
    return f"{value:g}"


def _where(m: Measurement) -> str:
    """Where the time went: the slowest ops and each engine's active share."""
    ops = sorted(m.op_seconds.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPS]
    total = m.total_time or 1.0
    lines = [f"  {name}: {s * 1e6:.3f} us ({100 * s / total:.0f}%)" for name, s in ops]
    engines = ", ".join(f"{e} {m.summary.get(f, 0.0):.0f}%" for e, f in ENGINE_FIELDS.items())
    if not ops:
        return f"engines active: {engines}"
    return "\n".join(["slowest ops:", *lines, f"engines active: {engines}"])


def _describe(m: Measurement) -> str:
    what = ", ".join(m.kernels) if m.kernels else "this block"
    return f"{what} on {m.chip}"


def check_no_fallback(m: Measurement) -> str | None:
    if not m.fallback_ops:
        return None
    by_calls = sorted(m.fallback_ops.items(), key=lambda kv: (-kv[1], kv[0]))
    ops = ", ".join(f"{name} x{n}" for name, n in by_calls)
    n, calls = len(m.fallback_ops), sum(m.fallback_ops.values())
    return (f"{n} op{'s' if n > 1 else ''} fell back to the host in {_describe(m)} "
            f"({calls} call{'s' if calls > 1 else ''}): {ops}. "
            f"Each pays a kernel launch and a host round trip; torch.neuron.get_fallback_ops() lists them.")


def check_budget(m: Measurement, budget_us: float) -> str | None:
    got = m.total_time_us
    if got <= budget_us:
        return None
    return (f"simulated device time of {_describe(m)} is {got:.3f} us, over the budget of {budget_us:g} us "
            f"by {100 * (got - budget_us) / budget_us:.1f}%\n{_where(m)}")


def check_bounds(m: Measurement, bounds: Mapping[str, tuple]) -> str | None:
    problems = []
    for key, (low, high) in bounds.items():
        value = _value(m, key)
        shown = f"{key} = {_fmt_value(key, value)}"
        if low is not None and value < low:
            problems.append(f"{shown} is below the lower bound {_fmt_value(key, low)}")
        if high is not None and value > high:
            problems.append(f"{shown} is above the upper bound {_fmt_value(key, high)}")
    if not problems:
        return None
    return f"{_describe(m)}: " + "; ".join(problems) + f"\n{_where(m)}"


def check_baseline(m: Measurement, store: BaselineStore, test: str, name: str, tolerance_pct: float,
                   update: bool, update_hint: str) -> str | None:
    record = m.figures()
    if update:
        store.put(test, name, m.chip, record)
        return None
    old = store.get(test, name, m.chip)
    if old is None:
        return (f"no baseline {name!r} for {test} on {m.chip} in {store.path} "
                f"(measured {record['time_us']:.3f} us). Record it with {update_hint}")
    before, after = float(old.get("time_us", 0.0)), record["time_us"]
    allowed = abs(before) * tolerance_pct / 100.0
    if abs(after - before) <= allowed:
        return None
    change = f"{100 * (after - before) / before:+.2f}%" if before else "from zero"
    within = f"within {tolerance_pct:g}%" if tolerance_pct else "exactly"
    return (f"simulated device time of {_describe(m)} changed from the baseline {name!r}: {before:.3f} us -> "
            f"{after:.3f} us ({change}; the gate asks for {within})\n"
            f"{diff_table(old, record)}\n"
            f"baseline file: {store.path}. If the change is intended, update it with {update_hint}")


class Gates:
    """The gates of one test: a baseline store, the test's id in it, and whether to update it."""

    def __init__(self, store: BaselineStore | None = None, test: str = "", *, update: bool = False,
                 update_hint: str = "--neuron-update-baselines"):
        self.store = store
        self.test = test
        self.update = update
        self.update_hint = update_hint

    # ---- one gate per line -----------------------------------------------------------------------
    def no_host_fallback(self):
        """``with neuron_perf.no_host_fallback(): ...`` — fails naming the ops that fell back."""
        return self.gate(no_fallback=True)

    def time_budget(self, us: float):
        """``with neuron_perf.time_budget(us=50): ...`` — simulated device time at most ``us``."""
        return self.gate(budget_us=us)

    def baseline(self, name: str, tolerance_pct: float = 0.0):
        """``with neuron_perf.baseline("forward", tolerance_pct=2): ...`` — within that many percent
        of the stored baseline (default: the same time exactly)."""
        return self.gate(baseline=name, tolerance_pct=tolerance_pct)

    def bounds(self, **bounds: tuple):
        """``with neuron_perf.bounds(tensor=(40, None), dma_bytes=(None, 8 << 20)): ...``"""
        return self.gate(bounds=bounds)

    # ---- the general forms -----------------------------------------------------------------------
    def gate(self, *, no_fallback: bool = False, budget_us: float | None = None, baseline: str | None = None,
             tolerance_pct: float = 0.0, bounds: Mapping[str, tuple] | None = None) -> GatedBlock:
        """Measure the block and check every gate given; all failures are reported together."""
        return GatedBlock(self, GateSpec(no_fallback, budget_us, baseline, tolerance_pct, bounds))

    def check(self, target, *, no_fallback: bool = False, budget_us: float | None = None,
              baseline: str | None = None, tolerance_pct: float = 0.0,
              bounds: Mapping[str, tuple] | None = None) -> Measurement:
        """Check a kernel's profile (``nki.simulate(k, profile=True)``), a measured block or a
        Measurement; returns the Measurement checked."""
        __tracebackhide__ = True
        spec = GateSpec(no_fallback, budget_us, baseline, tolerance_pct, bounds)
        if isinstance(target, Block):
            target = target.measurement if target.measurement is not None else target.snapshot()
        m = target if isinstance(target, Measurement) else from_profile(target)
        self._enforce(m, spec)
        return m

    def _enforce(self, m: Measurement, spec: GateSpec) -> None:
        __tracebackhide__ = True  # pytest shows the user's line, not ours
        failures = []
        if spec.no_fallback:
            failures.append(check_no_fallback(m))
        if spec.budget_us is not None:
            failures.append(check_budget(m, spec.budget_us))
        if spec.bounds:
            failures.append(check_bounds(m, spec.bounds))
        if spec.baseline is not None:
            if self.store is None:
                raise InputError(f"baseline {spec.baseline!r}: these gates have no baseline file "
                                 f"(Gates(store=BaselineStore(path), test=...))")
            failures.append(check_baseline(m, self.store, self.test, spec.baseline, spec.tolerance_pct,
                                           self.update, self.update_hint))
        failures = [f for f in failures if f]
        if failures:
            raise GateFailure("\n".join(failures))


class GatedBlock:
    """``with gates.gate(...) as block:`` — measured from entry to exit, checked at exit unless the
    block raised (then its exception goes on unchanged)."""

    def __init__(self, gates: Gates, spec: GateSpec):
        self.gates = gates
        self.spec = spec
        self.block = Block()

    def __enter__(self) -> Block:
        return self.block.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True
        measurement = self.block.stop()
        if exc_type is None:
            self.gates._enforce(measurement, self.spec)
        return False
