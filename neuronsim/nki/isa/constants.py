"""``nki.isa.constants``: the enums of ``nki.isa`` under the module name AWS's kernels import them
from (``from nki.isa.constants import oob_mode, dge_mode``). Same objects as ``nki.isa.<name>``."""

from neuronsim.nki.isa.enums import (
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]
