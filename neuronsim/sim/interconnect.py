"""Where ranks sit and what a collective costs: logical NeuronCores on chips, chips on instances.

Rank ``r`` of the world runs on logical core ``r % C`` of chip ``(r // C) % K`` of instance
``r // (C * K)`` (C logical cores per chip, K chips per instance), as torchrun lays out one process
per logical core. A group's collective runs at the bandwidth and per-step latency of the slowest
level its ranks span: the chip, NeuronLink between the chips of an instance, or the instance network
(EFA) beyond. No level is faster than a rank's own DMA engines move data (engines x bandwidth per
engine x physical cores per logical core), which is the chip level's bandwidth: collective traffic
is DMA traffic. The numbers are the chip file's ``[interconnect]`` table and its DMA values.

Cost formulas (n ranks, B bytes, bw and lat of that level), the usual bandwidth-optimal algorithms:

- all_reduce (ring reduce-scatter + all-gather): ``2(n-1)/n * B/bw + 2(n-1) * lat``
- all_gather, reduce_scatter, all_to_all, gather, scatter (B = the full, gathered size):
  ``(n-1)/n * B/bw + (n-1) * lat``
- broadcast, reduce (pipelined ring): ``B/bw + (n-1) * lat``
- barrier (dissemination): ``ceil(log2 n) * lat``
- send/recv: ``B/bw + lat`` over the link between the two ranks

A group of one rank costs nothing. Nothing here imports torch.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from neuronsim.errors import ChipSpecError

_CHIP_DIR = Path(__file__).resolve().parent / "chips"

# The levels a collective can cross, nearest first.
CHIP, NEURONLINK, INSTANCE_NETWORK = "chip", "neuronlink", "instance_network"
LEVELS = (CHIP, NEURONLINK, INSTANCE_NETWORK)


@dataclass(frozen=True)
class Interconnect:
    """A chip file's ``[interconnect]`` table, plus the chip's logical cores per chip."""

    logical_cores_per_chip: int
    dma_bandwidth_bytes_per_s: float  # of one logical core: the chip level's bandwidth
    chips_per_instance: int
    intra_chip_latency_ns: float
    neuronlink_bandwidth_bytes_per_s: float
    neuronlink_latency_ns: float
    instance_network_bandwidth_bytes_per_s: float
    instance_network_latency_ns: float

    def link(self, level: str) -> tuple[float, float]:
        """(bandwidth in bytes/s, latency per step in ns) of a level."""
        if level == CHIP:
            return self.dma_bandwidth_bytes_per_s, self.intra_chip_latency_ns
        prefix = {NEURONLINK: "neuronlink", INSTANCE_NETWORK: "instance_network"}[level]
        bandwidth = min(getattr(self, f"{prefix}_bandwidth_bytes_per_s"), self.dma_bandwidth_bytes_per_s)
        return bandwidth, getattr(self, f"{prefix}_latency_ns")

    def place(self, rank: int) -> tuple[int, int, int]:
        """(instance, chip in the instance, logical core in the chip) of a global rank."""
        per_instance = self.logical_cores_per_chip * self.chips_per_instance
        return (
            rank // per_instance,
            (rank // self.logical_cores_per_chip) % self.chips_per_instance,
            (rank % self.logical_cores_per_chip),
        )

    def level(self, ranks: Sequence[int]) -> str:
        """The slowest level the ranks span."""
        places = [self.place(r) for r in ranks]
        if len({p[0] for p in places}) > 1:
            return INSTANCE_NETWORK
        if len({p[1] for p in places}) > 1:
            return NEURONLINK
        return CHIP


_KEYS = tuple(
    f.name
    for f in fields(Interconnect)
    if f.name not in ("logical_cores_per_chip", "dma_bandwidth_bytes_per_s")
)


@functools.cache
def interconnect_from_file(
    path: str, logical_cores_per_chip: int, dma_bandwidth_bytes_per_s: float
) -> Interconnect:
    origin = f"{path} [interconnect]"
    try:
        table = tomllib.loads(Path(path).read_text()).get("interconnect")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ChipSpecError(f"{path}: cannot read chip file: {exc}") from exc
    if not isinstance(table, dict):
        raise ChipSpecError(
            f"{origin}: the chip file has no [interconnect] table "
            "(needed by collectives: torch.distributed, nki.collectives)"
        )
    missing, unknown = [k for k in _KEYS if k not in table], sorted(set(table) - set(_KEYS))
    if missing or unknown:
        raise ChipSpecError(f"{origin}: missing keys {missing}, unknown keys {unknown}")
    values = {}
    for key in _KEYS:
        entry = table[key]
        if (
            not isinstance(entry, dict)
            or set(entry) != {"value", "status", "source"}
            or not str(entry["source"]).strip()
        ):
            raise ChipSpecError(f"{origin}: {key} must be {{ value = ..., status = ..., source = ... }}")
        value = entry["value"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ChipSpecError(f"{origin}: {key} must be a positive number, got {value!r}")
        values[key] = int(value) if key == "chips_per_instance" else float(value)
    return Interconnect(logical_cores_per_chip, dma_bandwidth_bytes_per_s, **values)


def interconnect(chip) -> Interconnect:
    """The interconnect of a ChipSpec: its built-in file's table (a user's chip file must be named by
    path in ``NEURON_SIM_CHIP``; its ``[interconnect]`` table is read the same way)."""
    return interconnect_from_file(str(_CHIP_DIR / f"{chip.name}.toml"), *_core_figures(chip))


def interconnect_for_option(chip_option: str, chip) -> Interconnect:
    """As :func:`interconnect`, for the chip option's value (a name or a path to a .toml file)."""
    if str(chip_option).endswith(".toml"):
        return interconnect_from_file(str(Path(chip_option).resolve()), *_core_figures(chip))
    return interconnect(chip)


def _core_figures(chip) -> tuple[int, float]:
    return chip.logical_cores_per_chip, chip.dma_peak_bandwidth_bytes_per_s * chip.default_lnc


# Collective -> algorithm. Bytes are the full (gathered / unscattered) size; see the module docstring.
RING_ALL_REDUCE, RING, PIPELINE, DISSEMINATION, POINT_TO_POINT = (
    "ring_all_reduce",
    "ring",
    "pipeline",
    "dissemination",
    "point_to_point",
)
ALGORITHMS = {
    "all_reduce": RING_ALL_REDUCE,
    "all_gather": RING,
    "reduce_scatter": RING,
    "all_to_all": RING,
    "gather": RING,
    "scatter": RING,
    "broadcast": PIPELINE,
    "reduce": PIPELINE,
    "barrier": DISSEMINATION,
    "send": POINT_TO_POINT,
    "recv": POINT_TO_POINT,
}


def collective_ns(collective: str, nbytes: int, ranks: Sequence[int], net: Interconnect) -> float:
    """Simulated time of one collective over ``ranks`` (global ranks; for send/recv the two ends)."""
    n = len(set(ranks))
    if n <= 1:
        return 0.0
    bandwidth, latency = net.link(net.level(ranks))
    seconds_per_byte = 1.0 / bandwidth
    algorithm = ALGORITHMS[collective]
    if algorithm == RING_ALL_REDUCE:
        return 2 * (n - 1) / n * nbytes * seconds_per_byte * 1e9 + 2 * (n - 1) * latency
    if algorithm == RING:
        return (n - 1) / n * nbytes * seconds_per_byte * 1e9 + (n - 1) * latency
    if algorithm == PIPELINE:
        return nbytes * seconds_per_byte * 1e9 + (n - 1) * latency
    if algorithm == DISSEMINATION:
        return math.ceil(math.log2(n)) * latency
    return nbytes * seconds_per_byte * 1e9 + latency
