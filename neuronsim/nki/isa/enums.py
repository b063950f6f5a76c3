"""The enums of ``nki.isa`` (engines, reduce commands, DGE and OOB modes, perf modes, versions)."""

from __future__ import annotations

import enum
import functools

from neuronsim.sim.ir import Engine


class _AwsValues(enum.Enum):
    """An enum that also takes the integer value AWS's ``nki.isa`` gives each member (``_AWS_NAMES``):
    the library passes ``dge_mode=3`` where it means ``dge_mode.none``."""

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            names = _AWS_NAMES.get(cls.__name__, ())
            if 0 <= value < len(names) and names[value]:
                return cls[names[value]]
        return None


class engine(_AwsValues):
    """Neuron Device engines."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(_AwsValues):
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


_RC = reduce_cmd


class dge_mode(_AwsValues):
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(_AwsValues):
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


@functools.total_ordering
class nc_version(enum.Enum):
    """NeuronCore versions, ordered as kernels compare them (``get_nc_version() >= nc_version.gen3``)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4

    @classmethod
    def _missing_(cls, value):
        return cls.__members__.get(value) if isinstance(value, str) else None  # a chip's "gen3"

    def __lt__(self, other):
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value < other.value


class dma_engine(enum.Enum):
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown

_UNKNOWN = engine.unknown
_ENGINES = {
    engine.tensor: Engine.TENSOR,
    engine.vector: Engine.VECTOR,
    engine.scalar: Engine.SCALAR,
    engine.gpsimd: Engine.GPSIMD,
}


# Member names by AWS's integer values (aws-neuron-sdk nki/api/nki/isa).
_AWS_NAMES = {
    "engine": ("unknown", "tensor", "scalar", "gpsimd", "dma", "vector", "sync"),
    "reduce_cmd": ("idle", "reset", "reduce", "reset_reduce", "load_reduce"),
    "dge_mode": ("unknown", "swdge", "hwdge", "none"),
    "oob_mode": ("error", "skip"),
}
