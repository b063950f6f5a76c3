"""Copies on the device: ``copy_`` (which ``.to(dtype)``, ``.clone()``, ``.contiguous()`` and
``_to_copy`` reach) and ``cat`` (which ``stack`` reaches), as DMA transfers straight from HBM to HBM.

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


def cat(out, *ins, dim):
    """Each input copied into its slice of ``out`` along ``dim``."""
    start = 0
    for x in ins:
        n = x.shape[dim]
        copy(out.slice(dim, start, start + n), x)
        start += n


@native("aten::cat.default")
def plan_cat(call: Call) -> Launch | None:
    out = call.outputs[0]
    if len(call.inputs) != len(call.arg(0, "tensors")) or any(t.dim() != out.dim() for t in call.inputs):
        return None  # a CPU tensor or a legacy 1-D empty tensor in the list
    if any(t.dtype != out.dtype and not (t.dtype in FLOAT_DTYPES and out.dtype in FLOAT_DTYPES)
           for t in call.inputs) or numpy_dtype(out.dtype) is None:
        return None
    dim = call.arg(1, "dim", 0) % out.dim()
    return Launch(cat, (OUT(0), *(IN(i) for i in range(len(call.inputs)))), {"dim": dim})
