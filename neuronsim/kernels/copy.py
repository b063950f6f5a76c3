"""Copies on the device: ``copy_`` (which ``.to(dtype)``, ``.clone()``, ``.contiguous()`` and
``_to_copy`` reach), as DMA transfers straight from HBM to HBM.

Each ``[partitions, free]`` tile of the destination is one ``dma_copy`` from the source broadcast
to the destination's shape (stride-0 access patterns), whatever either's strides: transposes and
permutes are the same kernel. Same dtype: bit-exact; between float dtypes the DMA casts through
fp32 with round-to-nearest-even (ATen-CPU's rounding). Integer <-> float casts fall back.
"""

from __future__ import annotations

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES, numpy_dtype
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles


def copy(dst, src):
    views = [dst, src.broadcast_to(dst.shape)]
    tiles = elementwise_tiles(views)
    for i in nl.affine_range(len(tiles)):
        nisa.dma_copy(dst=tiles[i].of(0, dst), src=tiles[i].of(1, views[1]))


@native("aten::copy_.default")
def plan_copy(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    dst, src = call.inputs
    if numpy_dtype(dst.dtype) is None or numpy_dtype(src.dtype) is None:
        return None
    if dst.dtype != src.dtype and not (dst.dtype in FLOAT_DTYPES and src.dtype in FLOAT_DTYPES):
        return None
    return Launch(copy, (OUT(0), IN(1)))
