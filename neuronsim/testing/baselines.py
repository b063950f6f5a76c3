"""Performance baselines: a small TOML file next to the tests, and the diff table shown on failure.

One entry per (test, baseline name, chip) holds the figures of one gated block or kernel run
(:func:`figures`): simulated device time, each engine's active time, HBM and DMA traffic, and the
time of each op (device ops by ATen name, NKI kernels by instruction and engine)::

    ["test_perf.py::test_rmsnorm"."rmsnorm".trn2]
    time_us = 60.013125
    hbm_read_bytes = 8388608
    ...
    ["test_perf.py::test_rmsnorm"."rmsnorm".trn2.engine_active_us]
    vector = 35.41
    ...

Simulated time is deterministic, so a stored figure is exact: any difference is a change in the
code (the kernel, the model, or neuronsim's timing), never noise. Entries change only when
:meth:`BaselineStore.save` writes them — the pytest plugin does that under
``--neuron-update-baselines`` — and the file is written sorted, so its diff is reviewable.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

from neuronsim.errors import InputError

# Times are stored in microseconds rounded to 1e-6 us (a femtosecond): far below any cost in the
# model, far above float noise, and short enough to read.
TIME_DECIMALS = 6
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma")
MAX_OP_ROWS = 40  # ops past the slowest 40 are summed into one row, keeping the file small
OTHER_OPS = "(other ops)"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
HEADER = (
    "# neuronsim performance baselines: the simulated device time of each gated block or kernel,\n"
    "# per test, baseline name and chip (simulated time is deterministic: figures are exact).\n"
    "# Written by `pytest --neuron-sim --neuron-update-baselines`; review changes like code.\n"
)


def _us(seconds: float) -> float:
    return round(float(seconds) * 1e6, TIME_DECIMALS)


def figures(summary: Mapping, op_seconds: Mapping[str, float]) -> dict:
    """The baseline record of a measurement: its summary's key fields and its per-op times."""
    engines = {e: _us(summary.get(f"{e}_engine_active_time", 0.0)) for e in ENGINES if e != "dma"}
    engines["dma"] = _us(summary.get("dma_active_time", 0.0))
    ops = sorted(op_seconds.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ops[:MAX_OP_ROWS])
    if len(ops) > MAX_OP_ROWS:
        kept[OTHER_OPS] = sum(v for _, v in ops[MAX_OP_ROWS:])
    return {
        "time_us": _us(summary.get("total_time", 0.0)),
        "hbm_read_bytes": int(summary.get("hbm_read_bytes", 0)),
        "hbm_write_bytes": int(summary.get("hbm_write_bytes", 0)),
        "dma_transfers": int(summary.get("dma_transfer_count", 0)),
        "host_fallbacks": int(summary.get("host_fallback_count", 0)),
        "engine_active_us": engines,
        "op_us": {name: _us(seconds) for name, seconds in kept.items()},
    }


# ---- the diff table ------------------------------------------------------------------------------

def _rows(record: Mapping) -> dict[str, tuple[float, str]]:
    """Flat rows of a record: label -> (value, unit)."""
    rows = {"total": (record.get("time_us", 0.0), "us")}
    for engine, value in record.get("engine_active_us", {}).items():
        rows[f"engine {engine}"] = (value, "us")
    rows["HBM read"] = (record.get("hbm_read_bytes", 0), "B")
    rows["HBM write"] = (record.get("hbm_write_bytes", 0), "B")
    rows["DMA transfers"] = (record.get("dma_transfers", 0), "")
    rows["host fallbacks"] = (record.get("host_fallbacks", 0), "")
    for op, value in record.get("op_us", {}).items():
        rows[f"op {op}"] = (value, "us")
    return rows


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "us":
        return f"{value:.3f} us"
    if unit == "B":
        return f"{int(value):,} B"
    return f"{int(value):,}"


def _change(before: float | None, after: float | None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "gone"
    if before == after:
        return "="
    if before == 0:
        return f"+{after:g}"
    return f"{100.0 * (after - before) / before:+.2f}%"


def diff_table(before: Mapping, after: Mapping, *, all_rows: bool = False) -> str:
    """A plain-text table of what changed between two records: op or engine, before, after, change.

    The total always shows; other rows only when they changed (``all_rows``: every row)."""
    old, new = _rows(before), _rows(after)
    labels = list(new) + [k for k in old if k not in new]
    body = []
    for label in labels:
        b = old.get(label, (None, ""))
        a = new.get(label, (None, ""))
        unit = a[1] or b[1]
        if label != "total" and not all_rows and b[0] == a[0]:
            continue
        body.append((label, _fmt(b[0], unit), _fmt(a[0], unit), _change(b[0], a[0]),
                     abs((a[0] or 0) - (b[0] or 0)) if unit == "us" else 0.0))
    # the total first, then the biggest changes in time
    body.sort(key=lambda r: (r[0] != "total", not r[0].startswith("engine"), -r[4]))
    head = ("op or engine", "before", "after", "change")
    widths = [max(len(head[i]), *(len(r[i]) for r in body)) for i in range(4)]
    lines = []
    for r in (head, *body):
        lines.append("  ".join(r[i].ljust(widths[i]) if i == 0 else r[i].rjust(widths[i]) for i in range(4)))
    return "\n".join(lines)


# ---- the file ------------------------------------------------------------------------------------

def _key(text: str) -> str:
    return text if _BARE_KEY.match(text) else json.dumps(text, ensure_ascii=False)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(f"baseline values are numbers or strings, got {type(v).__name__}")


def dumps(entries: Mapping[str, Mapping[str, Mapping[str, Mapping]]]) -> str:
    """TOML text of ``entries[test][name][chip] = record``, sorted (a stable, reviewable diff)."""
    out = [HEADER]
    for test in sorted(entries):
        for name in sorted(entries[test]):
            for chip in sorted(entries[test][name]):
                record = entries[test][name][chip]
                path = ".".join(_key(k) for k in (test, name, chip))
                out.append(f"\n[{path}]\n")
                tables = []
                for field in sorted(record):
                    value = record[field]
                    if isinstance(value, Mapping):
                        tables.append((field, value))
                    else:
                        out.append(f"{_key(field)} = {_value(value)}\n")
                for field, table in tables:
                    out.append(f"\n[{path}.{_key(field)}]\n")
                    for k in table:  # kept in the record's order: slowest op first
                        out.append(f"{_key(k)} = {_value(table[k])}\n")
    return "".join(out)


class BaselineStore:
    """The baselines of one file: read once, looked up by (test, name, chip), written by :meth:`save`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._entries: dict | None = None
        self.updated: dict[tuple[str, str, str], str] = {}  # key -> "new" | "changed" | "same"

    @property
    def entries(self) -> dict:
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> dict:
        if not self.path.exists():
            return {}
        try:
            data = tomllib.loads(self.path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"baseline file {self.path} is not valid TOML: {exc}") from None
        for test, names in data.items():
            ok = isinstance(names, dict) and all(
                isinstance(chips, dict) and all(isinstance(r, dict) for r in chips.values())
                for chips in names.values())
            if not ok:
                raise InputError(f"baseline file {self.path}: entry {test!r} is not a table of "
                                 f"[test.name.chip] records")
        return data

    def get(self, test: str, name: str, chip: str) -> dict | None:
        return self.entries.get(test, {}).get(name, {}).get(chip)

    def put(self, test: str, name: str, chip: str, record: Mapping) -> str:
        """Stage ``record``; returns "new", "changed" or "same". :meth:`save` writes it."""
        old = self.get(test, name, chip)
        state = "new" if old is None else ("same" if old == record else "changed")
        self.entries.setdefault(test, {}).setdefault(name, {})[chip] = dict(record)
        self.updated[(test, name, chip)] = state
        return state

    def save(self) -> None:
        if self._entries is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(dumps(self._entries))
        tmp.replace(self.path)
