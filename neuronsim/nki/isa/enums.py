"""The enums of ``nki.isa`` (engines, reduce commands, DGE and OOB modes, perf modes, versions)."""

from __future__ import annotations

import enum

from neuronsim.sim.ir import Engine


class engine(enum.Enum):
    """Neuron Device engines."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


_RC = reduce_cmd


class dge_mode(enum.Enum):
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(enum.Enum):
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):
    gen2 = "gen2"
    gen3 = "gen3"
    gen4 = "gen4"


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
