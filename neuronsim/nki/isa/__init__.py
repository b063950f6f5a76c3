"""``nki.isa``: every IR instruction as its NKI 0.6 call (``dst`` first, documented names/defaults).

Each call checks what NKI checks at trace time — operand memories, partition and free-size limits,
shapes, dtypes — and records one instruction (a few calls record two, as their docs say) with the
``file:line`` of the kernel line. Errors are ``neuronsim.errors`` types naming the tile, its size,
the limit and that line. ``accumulate=None`` on ``nc_matmul`` is inferred as on hardware: the first
write to a PSUM location overwrites and later matmuls onto it accumulate, until something other
than TensorE reads it (the accumulation group is evicted).
"""

from neuronsim.errors import ConstraintError as NkiValidationError
from neuronsim.nki.isa import constants as constants  # nki.isa.constants (a module)
from neuronsim.nki.isa.dma import dma_compute, dma_copy, dma_transpose
from neuronsim.nki.isa.enums import (
    dge_mode,
    dma_engine,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from neuronsim.nki.isa.gpsimd import (
    affine_select,
    iota,
    local_gather,
    nc_n_gather,
    nonzero_with_count,
    sequence_bounds,
    tensor_partition_reduce,
    topk,
)
from neuronsim.nki.isa.misc import (
    NkiInstruction,
    core_barrier,
    get_nc_sub_version,
    get_nc_version,
    sendrecv,
)
from neuronsim.nki.isa.mx import nc_matmul_mx, quantize_mx
from neuronsim.nki.isa.registers import (
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
)
from neuronsim.nki.isa.scalar import activate2, activation, activation_reduce
from neuronsim.nki.isa.tensor import nc_matmul, nc_transpose
from neuronsim.nki.isa.vector import (
    bn_aggr,
    bn_stats,
    dropout,
    exponential,
    max8,
    memset,
    nc_find_index8,
    reciprocal,
    rng,
    scalar_tensor_tensor,
    select_reduce,
    set_rng_seed,
    tensor_copy,
    tensor_copy_predicated,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_cumulative,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
)
from neuronsim.nki.isa.vector_select import nc_match_replace8, nc_stream_shuffle, range_select
from neuronsim.nki.isa.xorwow import rand2, rand_get_state, rand_set_state

__all__ = [
    "NkiInstruction",
    "NkiValidationError",
    "VirtualRegister",
    "activate2",
    "activation",
    "activation_reduce",
    "affine_select",
    "bn_aggr",
    "bn_stats",
    "core_barrier",
    "dge_mode",
    "dma_compute",
    "dma_copy",
    "dma_engine",
    "dma_transpose",
    "dropout",
    "engine",
    "exponential",
    "get_nc_sub_version",
    "get_nc_version",
    "gpsimd_engine",
    "iota",
    "local_gather",
    "matmul_perf_mode",
    "max8",
    "memset",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_stream_shuffle",
    "nc_matmul",
    "nc_matmul_mx",
    "nc_n_gather",
    "nc_transpose",
    "nc_version",
    "nonzero_with_count",
    "oob_mode",
    "quantize_mx",
    "rand2",
    "rand_get_state",
    "rand_set_state",
    "range_select",
    "reciprocal",
    "reduce_cmd",
    "rng",
    "scalar_engine",
    "scalar_tensor_tensor",
    "select_reduce",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "sendrecv",
    "sequence_bounds",
    "set_rng_seed",
    "tensor_copy",
    "tensor_copy_predicated",
    "tensor_engine",
    "tensor_partition_reduce",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_scalar_cumulative",
    "tensor_scalar_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "topk",
    "unknown_engine",
    "vector_engine",
]
