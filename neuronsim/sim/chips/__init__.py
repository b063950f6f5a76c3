"""Chips as data: every number about a NeuronCore generation, with its source.

A chip is a TOML file (``trn2.toml``, ``trn3.toml`` beside this module, or a user's own file for
what-if studies) loaded into a frozen :class:`ChipSpec`. Unknown or missing keys are errors.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from neuronsim.errors import ChipSpecError

_CHIP_DIR = Path(__file__).parent
VALUE_STATUSES = ("published", "derived", "fitted", "assumed")


@dataclass(frozen=True)
class ChipValue:
    value: float | int
    status: str
    source: str


@dataclass(frozen=True)
class ChipSpec:
    name: str
    neuron_core_version: str
    nki_target: str

    physical_cores_per_chip: int
    default_lnc: int
    hbm_bytes_per_chip: int
    hbm_bandwidth_bytes_per_s: float
    host_link_bandwidth_bytes_per_s: float
    host_round_trip_latency_ns: float
    kernel_launch_overhead_ns: float
    neuronlink_bandwidth_bytes_per_s: float

    partitions: int
    sbuf_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes_per_partition: int

    tensor_engine_clock_hz: float
    vector_engine_clock_hz: float
    scalar_engine_clock_hz: float
    gpsimd_engine_clock_hz: float
    sync_engine_clock_hz: float
    pe_array_rows: int
    pe_array_cols: int

    matmul_stationary_free_max: int
    matmul_moving_free_max: int
    mm_init_latency_cycles: int
    fp32_matmul_cost_factor: int
    fp8_matmul_cost_factor: int
    transpose_fp32_speedup: int
    tensor_throttle_start_fraction: float
    tensor_throttle_ramp_ns: float
    tensor_throttle_window_ns: float
    tensor_throttle_utilization_threshold: float
    load_stationary_speedup: int
    tensor_engine_pipeline_latency_cycles: int

    min_ii_cycles: int
    vector_engine_pipeline_latency_cycles: int
    gpsimd_engine_pipeline_latency_cycles: int
    scalar_engine_pipeline_latency_cycles: int
    sync_engine_pipeline_latency_cycles: int
    sequencer_instruction_cycles: int
    register_load_cycles: int
    act_table_load_ns: float
    act_read_accumulator_cycles: int
    gpsimd_start_cycles: int
    gpsimd_topk_cycles_per_element: int
    gpsimd_topk_cycles_per_result: int
    vector_perf_mode_sbuf_16bit_speedup: int
    vector_perf_mode_other_16bit_speedup: int
    vector_free_max_sbuf: int
    vector_free_max_psum: int
    bn_stats_free_max: int
    vector_transpose_max_dim: int
    scalar_engine_16bit_speedup: int
    vector_reciprocal_cost_factor: int
    gpsimd_rsqrt_cost_factor: int
    access_stride_penalty_threshold_bytes: int
    access_stride_penalty_factor: int

    dma_engines: int
    dma_queues_per_engine: int
    dma_engine_bandwidth_bytes_per_s: float
    dma_hbm_run_min_ns: float
    dma_read_latency_ns: float
    dma_read_engine_stagger_ns: float
    dma_write_latency_ns: float
    dma_write_engine_stagger_ns: float
    dma_queue_issue_interval_ns: float
    dma_hwdge_issue_ns: float
    dma_swdge_issue_ns: float
    dma_transpose_hbm_efficiency: float
    dma_transpose_sbuf_efficiency: float

    # ScalarE activation-function tables: set name -> function names (``table_free``: no table).
    activation_tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    sources: Mapping[str, ChipValue] = field(default_factory=dict, repr=False, compare=False)

    # --- derived quantities (computed, never stored in the files) ---
    @property
    def logical_cores_per_chip(self) -> int:
        return self.physical_cores_per_chip // self.default_lnc

    @property
    def hbm_bytes_per_logical_core(self) -> int:
        return self.hbm_bytes_per_chip // self.logical_cores_per_chip

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes_per_partition

    @property
    def partitions_per_dma_engine(self) -> int:
        return self.partitions // self.dma_engines

    @property
    def dma_peak_bandwidth_bytes_per_s(self) -> float:
        return self.dma_engine_bandwidth_bytes_per_s * self.dma_engines

    @property
    def tensor_engine_peak_flops_bf16(self) -> float:
        """Dense bf16 FLOP/s of one physical core: rows x cols MACs x 2 flop x clock (S10)."""
        return self.pe_array_rows * self.pe_array_cols * 2 * self.tensor_engine_clock_hz

    def clock_hz(self, engine_name: str) -> float:
        return getattr(self, f"{engine_name}_engine_clock_hz")

    def pipeline_latency_cycles(self, engine_name: str) -> int:
        """Cycles from an instruction's issue interval ending to its results landing (its latency)."""
        return getattr(self, f"{engine_name}_engine_pipeline_latency_cycles")

    def activation_table(self, function: str) -> str | None:
        """The activation-table set holding ``function`` (None: it needs no table)."""
        for name, functions in self.activation_tables.items():
            if function in functions:
                return None if name == TABLE_FREE else name
        raise ChipSpecError(f"chip {self.name}: activation function {function!r} is in no "
                            f"[activation_tables] set")


_META_KEYS = ("name", "neuron_core_version", "nki_target")
_VALUE_KEYS = tuple(f.name for f in dataclasses.fields(ChipSpec)
                    if f.name not in _META_KEYS + ("sources", "activation_tables"))
TABLE_FREE = "table_free"  # the [activation_tables] entry of functions that need no table
_INT_KEYS = frozenset(f.name for f in dataclasses.fields(ChipSpec) if f.type == "int")


def _parse(doc: dict, origin: str) -> ChipSpec:
    meta = doc.get("chip")
    values = doc.get("values")
    if not isinstance(meta, dict) or not isinstance(values, dict):
        raise ChipSpecError(f"{origin}: a chip file needs a [chip] table and a [values] table")
    missing_meta = [k for k in _META_KEYS if k not in meta]
    if missing_meta or set(meta) - set(_META_KEYS):
        raise ChipSpecError(
            f"{origin}: [chip] must have exactly {list(_META_KEYS)}; "
            f"missing {missing_meta}, unknown {sorted(set(meta) - set(_META_KEYS))}"
        )
    missing = [k for k in _VALUE_KEYS if k not in values]
    unknown = sorted(set(values) - set(_VALUE_KEYS))
    if missing or unknown:
        raise ChipSpecError(f"{origin}: [values] missing keys {missing}, unknown keys {unknown}")
    sources: dict[str, ChipValue] = {}
    kwargs: dict = {k: meta[k] for k in _META_KEYS}
    for key in _VALUE_KEYS:
        entry = values[key]
        if not isinstance(entry, dict) or set(entry) != {"value", "status", "source"}:
            raise ChipSpecError(f"{origin}: {key} must be {{ value = ..., status = ..., source = ... }}")
        if entry["status"] not in VALUE_STATUSES:
            raise ChipSpecError(f"{origin}: {key}.status must be one of {VALUE_STATUSES}, "
                                f"got {entry['status']!r}")
        if not str(entry["source"]).strip():
            raise ChipSpecError(f"{origin}: {key} has an empty source")
        value = entry["value"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ChipSpecError(f"{origin}: {key} must be a non-negative number, got {value!r}")
        if key in _INT_KEYS:
            if value != int(value):
                raise ChipSpecError(f"{origin}: {key} must be a whole number, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        kwargs[key] = value
        sources[key] = ChipValue(value, entry["status"], entry["source"])
    kwargs["sources"] = MappingProxyType(sources)
    kwargs["activation_tables"] = _activation_tables(doc.get("activation_tables"), origin)
    spec = ChipSpec(**kwargs)
    if spec.physical_cores_per_chip % spec.default_lnc:
        raise ChipSpecError(f"{origin}: physical_cores_per_chip must be a multiple of default_lnc")
    if spec.partitions % spec.dma_engines:
        raise ChipSpecError(f"{origin}: partitions must be a multiple of dma_engines")
    return spec


def _activation_tables(table, origin: str) -> Mapping[str, tuple[str, ...]]:
    """``[activation_tables]``: status, source, and set name -> list of ScalarE function names."""
    from neuronsim.sim.ir import ActFunc

    if not isinstance(table, dict):
        raise ChipSpecError(f"{origin}: a chip file needs an [activation_tables] table "
                            f"(ScalarE function sets)")
    if table.get("status") not in VALUE_STATUSES or not str(table.get("source", "")).strip():
        raise ChipSpecError(f"{origin}: [activation_tables] needs a status in {VALUE_STATUSES} and a source")
    sets = {k: v for k, v in table.items() if k not in ("status", "source")}
    if TABLE_FREE not in sets:
        raise ChipSpecError(f"{origin}: [activation_tables] needs a {TABLE_FREE!r} list "
                            f"(functions without a table)")
    seen: dict[str, str] = {}
    for name, functions in sets.items():
        if not isinstance(functions, list) or not all(isinstance(f, str) for f in functions):
            raise ChipSpecError(f"{origin}: [activation_tables] {name} must be a list of function names")
        for f in functions:
            if f not in ActFunc.__members__:
                raise ChipSpecError(f"{origin}: [activation_tables] {name} names unknown function {f!r}; "
                                    f"known: {sorted(ActFunc.__members__)}")
            if f in seen:
                raise ChipSpecError(f"{origin}: [activation_tables] {f!r} is in both {seen[f]} and {name}")
            seen[f] = name
    missing = sorted(set(ActFunc.__members__) - set(seen))
    if missing:
        raise ChipSpecError(f"{origin}: [activation_tables] puts no set on {missing}")
    return MappingProxyType({k: tuple(v) for k, v in sets.items()})


def load_chip_file(path: str | os.PathLike) -> ChipSpec:
    """Load a chip description from a TOML file (a user's own chip works the same way)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ChipSpecError(f"{path}: cannot read chip file: {exc}") from exc
    return _parse(doc, str(path))


def available_chips() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in _CHIP_DIR.glob("*.toml")))


@functools.cache
def _builtin(name: str) -> ChipSpec:
    return load_chip_file(_CHIP_DIR / f"{name}.toml")


def get_chip(chip: str | os.PathLike | ChipSpec) -> ChipSpec:
    """A chip by name (``"trn2"``, ``"trn3"``), by path to a TOML file, or a spec passed through."""
    if isinstance(chip, ChipSpec):
        return chip
    name = str(chip)
    if name in available_chips():
        return _builtin(name)
    if name.endswith(".toml") and Path(name).exists():
        return load_chip_file(name)
    raise ChipSpecError(f"unknown chip {name!r}: choose one of {available_chips()} "
                        "or give a path to a .toml file")
