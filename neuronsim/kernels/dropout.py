"""Dropout: ``native_dropout`` (training) and ``native_dropout_backward``, with the mask drawn by
the Vector Engine's PRNG.

Forward, per [128, F] tile of the input (``tiling.elementwise_tiles``, so any strides): VectorE
``rng`` writes 16 random bits per element (uint16, the docs' recipe for uniforms), GpSimd compares
them with ``p * 2**16`` into the bool mask (``tensor_tensor`` against a threshold tile set once:
VectorE's ``tensor_scalar`` would do it too, but GpSimd is idle and VectorE is the bottleneck), and
VectorE computes ``(mask * scale) * x`` in one ``scalar_tensor_tensor``, which is ATen's
``x * mask * scale`` with one fp32 rounding (``scale = 1 / (1 - p)``, 0 for p = 1, rounded to fp32 as
ATen's opmath does). An element is kept with probability ``1 - ceil(p * 2**16) / 2**16``.

The seed: every call draws a fresh 32-bit seed from the device generator
(``@native(seeded=True)``: ``torch.manual_seed`` repeats the masks, successive calls differ) and
passes it to the Program as its runtime scalars (two 16-bit halves, exact in the fp32 runtime
vector), so one traced Program serves every call. The kernel rebuilds the 32-bit value on VectorE
(``hi << 16 | lo``) and ``set_rng_seed``\\ s the PRNG with it. The mask depends on the seed and the
input's layout (the tiles' order numbers the stream), nothing else.

Under ``NEURON_SIM_NUMERICS=fast`` the Program still runs (``Launch.result``): ATen-CPU's
``bernoulli_`` would draw another mask, and a mask must be one function of the seed in both modes.

``native_dropout_backward`` is point-wise, ``(mask * scale) * grad``: elementwise.py's tile loop with
one ``scalar_tensor_tensor``. Declined (host): ``train=False``, p outside [0, 1], fp16 and other
dtypes (fp32 and bf16 are native).
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.elementwise import elementwise
from neuronsim.kernels.registry import IN, OUT, RUNTIME, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import AluOp

A = AluOp
DTYPES = (torch.float32, torch.bfloat16)
RANDOM_BITS = 16  # per element: rng into uint16


# ---------------------------------------------------------------- the per-call seed


def seed_the_rng(halves):
    """``set_rng_seed(hi << 16 | lo)`` from the runtime vector's two fp32 halves (HBM [2])."""
    f = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=f, src=halves.ap([[2, 1], [1, 2]], offset=halves.offset))
    u = nl.ndarray((1, 2), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=f)  # whole numbers below 2**16: exact
    seed = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=seed, data=u[:, 0:1], op0=A.left_shift, operand0=16)
    nisa.tensor_tensor(dst=seed, data1=seed, data2=u[:, 1:2], op=A.bitwise_or, engine=nisa.vector_engine)
    nisa.set_rng_seed(seed)


# ---------------------------------------------------------------- forward


def dropout_forward(out, mask, x, halves, *, threshold, scale):
    tiles = elementwise_tiles([out, mask, x])
    seed_the_rng(halves)
    rows, widest = max(t.partitions for t in tiles), max(t.free for t in tiles)
    bound = nl.ndarray((rows, widest), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=bound, value=threshold, engine=nisa.gpsimd_engine)

    def draw(tile):
        bits = nl.ndarray((tile.partitions, tile.free), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.rng(dst=bits)
        return bits

    # VectorE draws tile i + 1's bits before it scales tile i: GpSimd's compare of tile i + 1 then
    # overlaps VectorE's scaling of tile i instead of VectorE waiting for it (engines run in order).
    bits_next = draw(tiles[0])
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        xt = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=tile.of(2, x))
        keep = nl.ndarray(shape, dtype=nl.bool_, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=keep, data1=bits_next, data2=bound[: tile.partitions, : tile.free],
                           op=A.greater_equal, engine=nisa.gpsimd_engine)
        if i + 1 < len(tiles):
            bits_next = draw(tiles[i + 1])
        res = nl.ndarray(shape, dtype=out.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=res, data=keep, op0=A.multiply, operand0=scale, op1=A.multiply,
                                  operand1=xt)
        nisa.dma_copy(dst=tile.of(0, out), src=res)
        nisa.dma_copy(dst=tile.of(1, mask), src=keep)


def _scale(p: float) -> float:
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)  # ATen's: no inf for p = 1


@native("aten::native_dropout.default", seeded=True)
def plan_native_dropout(call: Call) -> Launch | None:
    p, train = call.arg(1, "p"), call.arg(2, "train")
    x = call.inputs[0]
    if train is False or not isinstance(p, float | int) or not 0.0 <= p <= 1.0 or x.dtype not in DTYPES:
        return None
    return Launch(dropout_forward, (OUT(0), OUT(1), IN(0), RUNTIME),
                  {"threshold": float(p) * 2**RANDOM_BITS, "scale": _scale(float(p))},
                  result=tuple)  # ``result``: the Program runs under fast numerics too (module doc)


# ---------------------------------------------------------------- backward


def masked_scale(dst, grad, mask, scale):  # (mask * scale) * grad: ATen's grad * mask * scale
    nisa.scalar_tensor_tensor(dst=dst, data=mask, op0=A.multiply, operand0=scale, op1=A.multiply,
                              operand1=grad)


@native("aten::native_dropout_backward.default")
def plan_native_dropout_backward(call: Call) -> Launch | None:
    scale = call.arg(2, "scale")
    if len(call.inputs) != 2:
        return None
    grad, mask = call.inputs
    out = call.outputs[0]
    if grad.dtype not in DTYPES or out.dtype != grad.dtype or mask.dtype is not torch.bool:
        return None
    if not isinstance(scale, float | int):
        return None
    params = {"compute": masked_scale, "params": {"scale": float(scale)}}
    return Launch(elementwise, (OUT(0), IN(0), IN(1)), params)
