"""The engines. Each module owns its instructions: checks, semantics and cost side by side."""

from neuronsim.sim.engines import (
    control,
    dma,
    dma_compute,
    dma_indirect,
    gpsimd,
    gpsimd_gather,
    gpsimd_sequence,
    gpsimd_topk,
    mx,
    scalar,
    tensor,
    vector_bn,
    vector_copy,
    vector_exp,
    vector_rand2,
    vector_range_select,
    vector_reduce,
    vector_rng,
    vector_shuffle,
    vector_tensor_scalar,
    vector_tensor_tensor,
    vector_top_k,
)
from neuronsim.sim.engines.common import OpDef

ENGINE_MODULES = (tensor, vector_tensor_tensor, vector_tensor_scalar, vector_copy, vector_reduce, vector_bn,
                  vector_top_k, vector_shuffle, vector_range_select, vector_exp, vector_rng, vector_rand2,
                  scalar, gpsimd, gpsimd_gather, gpsimd_topk, gpsimd_sequence, dma, dma_indirect,
                  dma_compute, mx, control)


def _collect() -> dict:
    table: dict = {}
    for module in ENGINE_MODULES:
        for opdef in module.OPS:
            if opdef.opcode in table:
                raise AssertionError(f"{opdef.opcode.name} is defined by two engine modules")
            table[opdef.opcode] = opdef
    return table


OPDEFS: dict = _collect()
__all__ = ["OPDEFS", "OpDef", "ENGINE_MODULES"]
