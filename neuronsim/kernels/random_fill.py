"""Random fills from the device PRNG: ``normal_``, ``uniform_``, ``bernoulli_`` (a float or a tensor
of probabilities), ``random_`` (``from``/``to``) and ``randperm``.

As ``dropout.py``: every call draws a fresh 32-bit seed from the device's generator
(``@native(seeded=True)``, so ``torch.manual_seed`` repeats the values and successive calls differ)
and passes it to the one traced Program as runtime scalars; the kernel ``set_rng_seed``\\ s VectorE's
PRNG with it. The values are then a function of the seed and the tensor's layout (tiles number the
stream), under either numerics: a seeded op's Program also runs under ``NEURON_SIM_NUMERICS=fast``,
since ATen-CPU would draw from another generator. They are the device's own
stream, not the CPU's: a seed gives other numbers on ``neuron`` than on the CPU, as on any device.

Per ``[128, F]`` tile (``tiling.elementwise_tiles``, any strides): VectorE ``rng`` writes 32 random
bits per element, of which 24 (``bits & 0xFFFFFF``, a VectorE bit operation) make a uniform
``u = bits * 2**-24`` on [0, 1) (exact in fp32, as ATen's float uniforms):

- ``uniform_``: ``from + u * (to - from)``;
- ``normal_``: Box-Muller on two uniforms, ``mean + std * sqrt(-2 ln u1) * sin(2 pi u2 - pi)`` (u1 on
  (0, 1]; ScalarE log, sqrt and sin, the sine's argument inside the hardware's [-pi, pi]);
- ``bernoulli_``: ``u < p`` (VectorE compare, against a scalar or a tile of ``p``);
- ``random_(from, to)``: ``from + (bits mod (to - from))`` on the 24 bits (exact in fp32 below 2**24);
  int64 results are written as their two int32 words (the high word the sign).
- ``randperm(n)``: random 24-bit keys ranked on the device: for a block of 128 elements on the
  partitions, ``rank = #(keys smaller) + #(equal keys before it)`` (VectorE compares against every key
  broadcast along the free axis, then a free-axis sum), and the permutation is ``perm[rank] = i``,
  gathered by a TensorE matmul of the one-hot rank matrix with the indices (exact in fp32 below
  2**24). Quadratic in n: up to ``RANDPERM_MAX``.

Declined (host): an explicit ``generator``, integer ranges of 2**24 or more, dtypes other than
float32 / bfloat16 / float16 (and int32 / int64 for ``random_``).
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.dropout import seed_the_rng
from neuronsim.kernels.registry import IN, OUT, RUNTIME, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
BITS = 24  # random bits per uniform: fp32's significand
UNIT = 2.0**-BITS
RANGE_MAX = 2**BITS  # random_'s ranges, exact in fp32
RANDPERM_MAX = 8192


def _uniform(shape, plus=0.0):
    """fp32 tile of ``(24 random bits + plus) * 2**-24``."""
    bits = nl.ndarray(shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.rng(dst=bits)
    nisa.tensor_scalar(dst=bits, data=bits, op0=A.bitwise_and, operand0=float(RANGE_MAX - 1))
    u = nl.ndarray(shape, dtype=F32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=bits, op0=A.add, operand0=plus, op1=A.multiply, operand1=UNIT)
    return u


def fill(out, halves, *extra, compute, params):
    """For each tile of ``out`` (and ``extra`` views broadcast to it): ``compute(dst, *extra_tiles)``."""
    views = [out, *(v.broadcast_to(out.shape) for v in extra)]
    tiles = elementwise_tiles(views)
    seed_the_rng(halves)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        loaded = []
        for k, v in enumerate(views[1:], start=1):
            t = nl.ndarray(shape, dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(k, v))
            loaded.append(t)
        res = nl.ndarray(shape, dtype=out.dtype, buffer=nl.sbuf)
        compute(res, *loaded, **params)
        nisa.dma_copy(dst=tile.of(0, out), src=res)


def normal(dst, mean, std):
    shape = dst.shape
    u1, u2 = _uniform(shape, plus=1.0), _uniform(shape)  # u1 on (0, 1]: log(u1) is finite
    r, s = (nl.ndarray(shape, dtype=F32, buffer=nl.sbuf) for _ in range(2))
    nisa.activation(dst=r, op=ActFunc.log, data=u1)
    nisa.activation(dst=r, op=ActFunc.sqrt, data=r, scale=-2.0)
    nisa.activation(dst=s, op=ActFunc.sin, data=u2, scale=2 * math.pi, bias=-math.pi)
    nisa.scalar_tensor_tensor(dst=r, data=r, op0=A.multiply, operand0=std, op1=A.multiply, operand1=s)
    nisa.tensor_scalar(dst=dst, data=r, op0=A.add, operand0=mean)


def uniform(dst, low, high):
    u = _uniform(dst.shape)
    nisa.tensor_scalar(dst=u, data=u, op0=A.multiply, operand0=high - low)
    nisa.tensor_scalar(dst=dst, data=u, op0=A.add, operand0=low)


def bernoulli(dst, *p, prob=None):
    u = _uniform(dst.shape)
    if p:
        nisa.tensor_tensor(dst=dst, data1=u, data2=p[0], op=A.less)
    else:
        nisa.tensor_scalar(dst=dst, data=u, op0=A.less, operand0=prob)


def random_int(dst, low, span):
    """``low + bits mod span``."""
    u = _uniform(dst.shape)
    nisa.tensor_scalar(dst=u, data=u, op0=A.multiply, operand0=float(RANGE_MAX), op1=A.mod,
                       operand1=float(span))
    nisa.tensor_scalar(dst=dst, data=u, op0=A.add, operand0=float(low))


def random_int64(words, halves, *, low, span):
    """``random_int`` into an int64 tensor's words ``[..., 2]``: the value, then its sign word."""
    lo, hi = words[..., 0], words[..., 1]
    tiles = elementwise_tiles([lo, hi])
    seed_the_rng(halves)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        value, sign = (nl.ndarray(shape, dtype=nl.int32, buffer=nl.sbuf) for _ in range(2))
        random_int(value, low, span)
        if low >= 0:
            nisa.memset(sign, 0.0, engine=nisa.engine.gpsimd)
        else:  # -1 below zero: -(value < 0)
            nisa.tensor_scalar(dst=sign, data=value, op0=A.less, operand0=0.0, op1=A.multiply, operand1=-1.0)
        nisa.dma_copy(dst=tile.of(0, lo), src=value)
        nisa.dma_copy(dst=tile.of(1, hi), src=sign)


# ---------------------------------------------------------------- randperm


def randperm(out, halves, *, n, words):
    """``out`` [n] (int64 words ``[n, 2]`` or int32 / float) = a random permutation of ``0 .. n-1``."""
    P = nl.tile_size.pmax
    seed_the_rng(halves)
    keys = _uniform((1, n))  # one row of keys, broadcast to the partitions below
    row = nl.ndarray((P, n), dtype=F32, buffer=nl.sbuf)
    ones = nl.ones((1, P), dtype=F32, buffer=nl.sbuf)
    for c0, cn in _chunks(n, nl.tile_size.gemm_moving_fmax):  # the key row on every partition (TensorE)
        ps = nl.ndarray((P, cn), dtype=F32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=ones, moving=keys[:, c0:c0 + cn])
        nisa.tensor_copy(dst=row[:, c0:c0 + cn], src=ps)
    index = nl.ndarray((P, n), dtype=F32, buffer=nl.sbuf)
    nisa.iota(index, pattern=[[1, n]], offset=0, channel_multiplier=0)
    ranks = []
    for b0, bn in _chunks(n, P):
        mine = nl.ndarray((bn, 1), dtype=F32, buffer=nl.sbuf)  # this block's keys, one per partition
        ps = nl.ndarray((bn, 1), dtype=F32, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=keys[:, b0:b0 + bn])
        nisa.tensor_copy(dst=mine, src=ps)
        me = nl.ndarray((bn, 1), dtype=F32, buffer=nl.sbuf)
        nisa.iota(me, pattern=[[0, 1]], offset=b0, channel_multiplier=1)
        less, ties = (nl.ndarray((bn, n), dtype=F32, buffer=nl.sbuf) for _ in range(2))
        nisa.tensor_scalar(dst=less, data=row[:bn], op0=A.less, operand0=mine)
        nisa.tensor_scalar(dst=ties, data=row[:bn], op0=A.equal, operand0=mine)
        before = nl.ndarray((bn, n), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=before, data=index[:bn], op0=A.less, operand0=me)
        nisa.tensor_tensor(dst=ties, data1=ties, data2=before, op=A.multiply)
        nisa.tensor_tensor(dst=less, data1=less, data2=ties, op=A.add)
        rank = nl.ndarray((bn, 1), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=rank, op=A.add, data=less, axis=1)
        ranks.append((b0, bn, rank, me))
    res = nl.ndarray((1, n), dtype=F32, buffer=nl.sbuf)
    for r0, rn in _chunks(n, nl.tile_size.gemm_moving_fmax):  # perm[r] = sum_i i * (rank_i == r)
        acc = nl.ndarray((1, rn), dtype=F32, buffer=nl.psum)
        for _, bn, rank, me in ranks:
            hot = nl.ndarray((bn, rn), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=hot, data=index[:bn, r0:r0 + rn], op0=A.equal, operand0=rank)
            nisa.nc_matmul(dst=acc, stationary=me, moving=hot)
        nisa.tensor_copy(dst=res[:, r0:r0 + rn], src=acc)
    _store_indices(out, res, n, words)


def _store_indices(out, res, n, words):
    if not words:
        t = nl.ndarray((1, n), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=res)
        nisa.dma_copy(dst=out.ap([[n, 1], [out.dims[0][0], n]], offset=out.offset), src=t)
        return
    w = nl.ndarray((1, n, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(w, 0.0, engine=nisa.engine.gpsimd)
    nisa.tensor_copy(dst=w[:, :, 0], src=res)
    nisa.dma_copy(dst=out.ap([[2 * n, 1], [out.dims[0][0], n], [1, 2]], offset=out.offset), src=w)


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


# ---------------------------------------------------------------- planners


def _no_generator(call: Call) -> bool:
    return call.kwargs.get("generator") is None and not any(isinstance(a, torch.Generator) for a in call.args)


def _fill(call: Call, compute, extra=(), **params) -> Launch:
    return Launch(fill, (IN(0), RUNTIME, *extra), {"compute": compute, "params": params})


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


@native("aten::normal_.default", seeded=True)
def plan_normal(call: Call) -> Launch | None:
    x = call.inputs[0]
    mean, std = _number(call.arg(1, "mean", 0.0)), _number(call.arg(2, "std", 1.0))
    if x.dtype not in FLOAT_DTYPES or mean is None or std is None or std < 0 or not _no_generator(call):
        return None
    return _fill(call, normal, mean=mean, std=std)


@native("aten::uniform_.default", seeded=True)
def plan_uniform(call: Call) -> Launch | None:
    x = call.inputs[0]
    low, high = _number(call.arg(1, "from", 0.0)), _number(call.arg(2, "to", 1.0))
    if x.dtype not in FLOAT_DTYPES or low is None or high is None or low > high or not _no_generator(call):
        return None
    return _fill(call, uniform, low=low, high=high)


@native("aten::bernoulli_.float", "aten::bernoulli_.Tensor", seeded=True)
def plan_bernoulli(call: Call) -> Launch | None:
    x = call.inputs[0]
    if x.dtype not in (*FLOAT_DTYPES, torch.bool, torch.int32, torch.uint8) or not _no_generator(call):
        return None
    p = call.arg(1, "p", 0.5)
    if isinstance(p, torch.Tensor):
        if len(call.inputs) != 2 or p.dtype not in FLOAT_DTYPES:
            return None
        try:
            if torch.broadcast_shapes(p.shape, x.shape) != x.shape:
                return None
        except RuntimeError:
            return None
        return _fill(call, bernoulli, extra=(IN(1),))
    p = _number(p)
    if p is None or not 0.0 <= p <= 1.0:
        return None
    return _fill(call, bernoulli, prob=p)


@native("aten::random_.from", "aten::random_.to", seeded=True)
def plan_random(call: Call) -> Launch | None:
    x = call.inputs[0]
    names = [a.name for a in call.op._schema.arguments]
    low = call.arg(names.index("from"), "from", 0) if "from" in names else 0
    high = call.arg(names.index("to"), "to")
    if high is None or not isinstance(low, int) or not isinstance(high, int) or not _no_generator(call):
        return None
    span = high - low
    if not (0 < span <= RANGE_MAX and -(2**31) <= low and high <= 2**31):
        return None
    if x.dtype is torch.int64:
        return Launch(random_int64, (IN(0), RUNTIME), {"low": low, "span": span})
    if x.dtype not in (*FLOAT_DTYPES, torch.int32):
        return None
    if x.dtype in (torch.bfloat16, torch.float16) and max(abs(low), abs(high)) > 2**8:
        return None  # 16-bit floats hold few integers exactly
    return _fill(call, random_int, low=low, span=span)


@native("aten::randperm.generator_out", seeded=True)
def plan_randperm(call: Call) -> Launch | None:
    n = call.arg(0, "n")
    out = call.outputs[0]
    if not isinstance(n, int) or not 0 < n <= RANDPERM_MAX or call.arg(1, "generator") is not None:
        return None
    if out.dtype not in (torch.int64, torch.int32, torch.float32) or out.dim() != 1:
        return None
    return Launch(randperm, (OUT(0), RUNTIME), {"n": n, "words": out.dtype is torch.int64})
