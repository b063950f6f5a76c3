"""``arange``: ``start + step * i`` generated on-chip by GpSimd ``iota``, no HBM reads.

``torch.arange`` (CompositeExplicitAutograd) makes an empty device tensor and calls
``arange.start_out``, which the registry takes as an ``out=`` op (it resizes ``out`` first). The
output is cut into ``[128, F]`` tiles (``tiling.elementwise_tiles``: element ``i0 + p * F + f``,
each partition a contiguous run, so one big DMA per tile stores it).

- integers (int32, and int64 under the device's 64-bit policy): ``iota`` computes the values
  themselves, exactly, in int32 (offset ``start + step * i0``, channel multiplier ``step * F``,
  free step ``step``). An int64 element is its (low, high) int32 words (``bridge.py``): ``iota``
  writes the low words into every other column of the tile, the high words are the sign (a
  memset when every value has the same sign, else VectorE's ``(v < 0) * -1``), and the whole
  ``[p, 2F]`` tile goes out in one DMA;
- floats (fp32, bf16, fp16): integral ``start`` and ``step`` with values exact in fp32 are ``iota``'s
  integers converted once (what ATen computes); otherwise ``iota`` gives the index ``i`` (exact
  below 2**24) and one VectorE ``tensor_scalar`` computes ``i * step + start`` in fp32, rounded
  once to the output dtype. ATen-CPU uses double (fp32) or fp32 (16-bit) with vectorised partial
  sums, so a fractional step can differ from it by an ulp or so of the largest ``|i * step|``.

Declined (the host computes them): other dtypes, scalars that are not integers for an integer
output, values outside int32 (or past 2**24 for an integral float range), more than 2**24 float
elements, and ``out`` tensors that are not one-dimensional with a non-zero stride.
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.registry import OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import AluOp

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
FP32_EXACT = 2**24  # integers up to this are exact in fp32 (iota's float conversion, VectorE's index)
_INTS = (torch.int32, torch.int64)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def arange(out, *, start, step, exact: bool, wide: bool = False, sign: int | None = None):
    """``out[i] = start + step * i``. ``exact``: the values are iota's integers; else iota gives
    ``i`` and VectorE scales it. ``wide``: int64 ``out`` (its (low, high) words); ``sign``: the
    high word of every value (0 or -1), None if the values' signs differ."""
    stride = out.dims[0][0]
    # The low words (int64) or the elements: a 1-D view the tiles walk.
    flat = out.ap([[stride, out.shape[0]]], offset=out.offset)
    tiles = elementwise_tiles([flat])
    for k in nl.affine_range(len(tiles)):  # rotating SBUF buffers: tile k+1's iota overlaps tile k's store
        tile = tiles[k]
        p, f = tile.partitions, tile.free
        off, pattern = tile.aps[0]
        i0 = off // stride
        if wide:
            t = nl.ndarray((p, 2 * f), dtype=nl.int32, buffer=nl.sbuf)
            low, high = t[:, 0::2], t[:, 1::2]
            nisa.iota(low, [[step, f]], offset=start + step * i0, channel_multiplier=step * f)
            if sign is None:
                nisa.tensor_scalar(high, low, AluOp.less, 0.0, op1=AluOp.multiply, operand1=-1.0)
            else:
                nisa.memset(high, sign)
            nisa.dma_copy(dst=out.ap([*map(list, pattern), [1, 2]], offset=out.offset + off), src=t)
            continue
        t = nl.ndarray((p, f), dtype=out.dtype, buffer=nl.sbuf)
        if exact:
            nisa.iota(t, [[step, f]], offset=start + step * i0, channel_multiplier=step * f)
        else:
            i = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
            nisa.iota(i, [[1, f]], offset=i0, channel_multiplier=f)
            nisa.tensor_scalar(t, i, AluOp.multiply, step, op1=AluOp.add, operand1=start)
        nisa.dma_copy(dst=tile.of(0, flat), src=t)


def _is_int(x) -> bool:
    return isinstance(x, int) or isinstance(x, float) and x.is_integer()


@native("aten::arange.start_out")
def plan_arange(call: Call) -> Launch | None:
    out = call.outputs[0]
    start, end, step = call.arg(0, "start"), call.arg(1, "end"), call.arg(2, "step", 1)
    if out.dim() != 1 or out.stride(0) == 0 or any(isinstance(x, bool) for x in (start, end, step)):
        return None
    n = out.numel()
    if out.dtype in _INTS:
        if not all(isinstance(x, int) for x in (start, step)):
            return None  # ATen truncates float scalars to the integer type first: leave it the host's
        values = (start, start + step * (n - 1))
        if not all(INT32_MIN <= v <= INT32_MAX for v in values):
            return None  # the chip's 32-bit integers
        statics = {"start": start, "step": step, "exact": True}
        if out.dtype is torch.int64:
            sign = 0 if min(values) >= 0 else -1 if max(values) < 0 else None
            statics.update(wide=True, sign=sign)
        return Launch(arange, (OUT(0),), statics)
    scalars = (start, step)
    if out.dtype not in _FLOATS or n > FP32_EXACT or not all(isinstance(x, int | float) for x in scalars):
        return None
    last = start + step * (n - 1)
    exact = _is_int(start) and _is_int(step) and max(abs(start), abs(last)) <= FP32_EXACT
    kind = int if exact else float
    return Launch(arange, (OUT(0),), {"start": kind(start), "step": kind(step), "exact": exact})
