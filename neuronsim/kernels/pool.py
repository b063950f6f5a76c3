"""Pooling: ``max_pool2d_with_indices``, ``avg_pool2d``, ``_adaptive_avg_pool2d`` and their backward
ops.

Layout: one image plane (an ``(n, c)`` pair) per partition, 128 planes per tile, the plane's rows and
columns along the free axis. Pooling never mixes planes, so each window is a strided access pattern
inside one partition and every step is a VectorE instruction over a whole tile of planes: for each
kernel tap ``(kh, kw)`` the output positions whose input element is inside the image form a
rectangle, and the tap's input elements for them are one strided window of the plane. Padding is
never materialized: a tap simply skips the positions it would read out of bounds.

- Max pooling scans the taps in ATen's order (row by row) and keeps, per output position, the
  running maximum and which tap it came from: ``take = (x > max) | isnan(x)`` (VectorE compare, the
  NaN test on GpSimd), then ``tensor_copy_predicated`` moves the value and a ``select`` the tap's
  offset. The index ATen returns (``ih * W + iw``) is that offset plus the window's origin, a GpSimd
  ``iota``, written as int64 (low words, zero high words). A position no tap has updated keeps the
  first in-bounds tap, as ATen does when every value is ``-inf``.
- Its backward compares the saved index, less the window origin, with each tap's offset and adds
  ``grad_output`` where they match into the tap's window of the input gradient, taps in reverse
  order so that each input element receives its contributions in ATen's order (by output position).
- Average pooling adds the taps' windows in ATen's order (fp32) and divides by ATen's divisor
  (the window size, clipped or not by the padding as ``count_include_pad`` says, or
  ``divisor_override``): one ``tensor_scalar`` when it is the same everywhere, else a per-position
  divisor tile made at trace time. Its backward adds ``grad_output / divisor`` into each tap's
  window. Adaptive average pooling is average pooling when the sizes divide; other sizes reduce each
  output's window (``tensor_reduce``) and divide by its height then its width, as ATen does.

Covered: float32 / bfloat16 / float16, ``[N, C, H, W]`` and ``[C, H, W]``, planes of at most
``PLANE_ELEMS`` elements. Larger planes run on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
PLANE_ELEMS = 8192  # elements of one plane per partition (32 KiB of fp32): the tiles of a step fit SBUF
MAX_WINDOWS = 256  # adaptive pooling with sizes that do not divide: windows reduced one by one


# ---------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Pool:
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]


@dataclass(frozen=True)
class Tap:
    """Kernel tap ``offset`` (``kh * dil * W + kw * dil``): output rows ``r0 .. r0+nr`` and cols
    ``c0 .. c0+nc`` read input rows ``ir0 + t * stride`` and cols ``ic0 + u * stride``."""

    offset: int
    r0: int
    nr: int
    c0: int
    nc: int
    ir0: int
    ic0: int


def _inside(k: int, stride: int, pad: int, dil: int, n_in: int, n_out: int) -> tuple[int, int]:
    """Output indices o in [lo, hi) with ``0 <= o * stride - pad + k * dil < n_in``."""
    lo = max(0, -(-(pad - k * dil) // stride))
    hi = min(n_out, (n_in - 1 + pad - k * dil) // stride + 1)
    return lo, max(lo, hi)


def taps(p: Pool) -> list[Tap]:
    (sh, sw), (ph, pw), (dh, dw) = p.stride, p.padding, p.dilation
    out = []
    for kh in range(p.kh):
        r0, r1 = _inside(kh, sh, ph, dh, p.h, p.oh)
        for kw in range(p.kw):
            c0, c1 = _inside(kw, sw, pw, dw, p.w, p.ow)
            if r1 > r0 and c1 > c0:
                out.append(Tap(kh * dh * p.w + kw * dw, r0, r1 - r0, c0, c1 - c0,
                               r0 * sh - ph + kh * dh, c0 * sw - pw + kw * dw))
    return out


def covers_all(t: Tap, p: Pool) -> bool:
    return t.nr == p.oh and t.nc == p.ow


def rect(tile, t: Tap):
    return tile[:, t.r0:t.r0 + t.nr, t.c0:t.c0 + t.nc]


def window(tile, t: Tap, p: Pool):
    (sh, sw) = p.stride
    return tile[:, t.ir0:t.ir0 + sh * (t.nr - 1) + 1:sh, t.ic0:t.ic0 + sw * (t.nc - 1) + 1:sw]


def origins(p: Pool, parts: int):
    """fp32 tile ``[parts, OH, OW]`` of each window's origin index ``(oh*sh - ph) * W + ow*sw - pw``."""
    (sh, sw), (ph, pw) = p.stride, p.padding
    t = nl.ndarray((parts, p.oh, p.ow), dtype=F32, buffer=nl.sbuf)
    nisa.iota(t, pattern=[[sh * p.w, p.oh], [sw, p.ow]], offset=-ph * p.w - pw, channel_multiplier=0)
    return t


# ---------------------------------------------------------------- planes


def plane_chunks(views) -> list[tuple[int, int]]:
    """``(first plane, planes)`` tiles of 128 planes over ``[N, C, ...]`` views; a tile stays within
    one image unless every view walks its images and channels as one dim."""
    P = nl.tile_size.pmax
    n, c = views[0].shape[:2]
    merged = n == 1 or all(v.dims[0][0] == v.dims[1][0] * c for v in views)
    if merged:
        return [(i, min(P, n * c - i)) for i in range(0, n * c, P)]
    return [(j * c + i, min(P, c - i)) for j in range(n) for i in range(0, c, P)]


def planes(view, p0: int, cnt: int, words: int = 1):
    """HBM pattern ``[cnt planes, H, W(, words)]`` of planes ``p0 ..`` of ``view`` [N, C, H, W(, 2)]."""
    c = view.shape[1]
    (sn, _), (sc, _) = view.dims[:2]
    rest = [list(d) for d in view.dims[2:]]
    return view.ap([[sc, cnt], *rest], offset=view.offset + (p0 // c) * sn + (p0 % c) * sc)


def load(view, p0, cnt, shape, dtype=None):
    t = nl.ndarray((cnt, *shape), dtype=dtype or view.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=planes(view, p0, cnt))
    return t


# ---------------------------------------------------------------- max pooling


def max_pool(out, idx, x, *, pool: Pool):
    out, idx, x = _batched(out), _batched(idx, words=True), _batched(x)
    ts = taps(pool)
    chunks = plane_chunks([out, idx, x])
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        xt = load(x, p0, cnt, (pool.h, pool.w))
        best = nl.ndarray((cnt, pool.oh, pool.ow), dtype=x.dtype, buffer=nl.sbuf)
        which = nl.ndarray((cnt, pool.oh, pool.ow), dtype=F32, buffer=nl.sbuf)
        rest = ts
        if covers_all(ts[0], pool):
            nisa.tensor_copy(dst=best, src=window(xt, ts[0], pool))
            nisa.memset(which, float(ts[0].offset), engine=nisa.engine.gpsimd)
            rest = ts[1:]
        else:  # ATen's start: -inf, and the first in-bounds tap's index
            nisa.memset(best, -math.inf)
            for t in reversed(ts):
                nisa.memset(rect(which, t), float(t.offset), engine=nisa.engine.gpsimd)
        for t in rest:
            v, b, w = window(xt, t, pool), rect(best, t), rect(which, t)
            take = nl.ndarray((cnt, t.nr, t.nc), dtype=nl.uint8, buffer=nl.sbuf)
            nan = nl.ndarray((cnt, t.nr, t.nc), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=nan, data1=v, data2=v, op=A.not_equal, engine=nisa.engine.gpsimd)
            nisa.tensor_tensor(dst=take, data1=v, data2=b, op=A.greater)
            nisa.tensor_tensor(dst=take, data1=take, data2=nan, op=A.logical_or)
            nisa.tensor_copy_predicated(dst=b, src=v, predicate=take)
            nisa.select_reduce(dst=w, predicate=take, on_true=w, on_false=float(t.offset), reverse_pred=True)
        words = nl.ndarray((cnt, pool.oh, pool.ow, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(words, 0.0, engine=nisa.engine.gpsimd)
        nisa.tensor_tensor(dst=words[:, :, :, 0], data1=which, data2=origins(pool, cnt), op=A.add)
        nisa.dma_copy(dst=planes(out, p0, cnt), src=best)
        nisa.dma_copy(dst=planes(idx, p0, cnt), src=words)


def max_pool_backward(gi, go, idx, *, pool: Pool):
    gi, go, idx = _batched(gi), _batched(go), _batched(idx, words=True)
    ts = taps(pool)
    chunks = plane_chunks([gi, go, idx])
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        g = load(go, p0, cnt, (pool.oh, pool.ow))
        rel = nl.ndarray((cnt, pool.oh, pool.ow), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=rel, src=planes(idx, p0, cnt)[:, :, :, 0])  # low words, as fp32
        nisa.tensor_tensor(dst=rel, data1=rel, data2=origins(pool, cnt), op=A.subtract)
        acc = nl.ndarray((cnt, pool.h, pool.w), dtype=F32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0, engine=nisa.engine.gpsimd)
        for t in reversed(ts):  # input elements receive their contributions by output position
            hit = nl.ndarray((cnt, t.nr, t.nc), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=hit, data=rect(rel, t), op0=A.equal, operand0=float(t.offset))
            part = nl.ndarray((cnt, t.nr, t.nc), dtype=F32, buffer=nl.sbuf)
            nisa.select_reduce(dst=part, predicate=hit, on_true=rect(g, t), on_false=0.0)
            dst = window(acc, t, pool)
            nisa.tensor_tensor(dst=dst, data1=dst, data2=part, op=A.add)
        _store(gi, p0, cnt, acc)


def _store(view, p0, cnt, acc):
    if view.dtype != F32:
        res = nl.ndarray(acc.shape, dtype=view.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc, engine=nisa.engine.scalar)
        acc = res
    nisa.dma_copy(dst=planes(view, p0, cnt), src=acc)


def _batched(view, words: bool = False):
    dims = len(view.shape) - (1 if words else 0)
    return view.expand_dim(0) if dims == 3 else view


# ---------------------------------------------------------------- average pooling


def divisors(p: Pool, count_include_pad: bool, override) -> np.ndarray:
    """ATen's divisor per output position."""
    (sh, sw), (ph, pw) = p.stride, p.padding
    out = np.zeros((p.oh, p.ow), dtype=np.float32)
    for i in range(p.oh):
        h0 = i * sh - ph
        h1 = min(h0 + p.kh, p.h + ph)
        for j in range(p.ow):
            w0 = j * sw - pw
            w1 = min(w0 + p.kw, p.w + pw)
            inside = (min(h1, p.h) - max(h0, 0)) * (min(w1, p.w) - max(w0, 0))
            out[i, j] = override or ((h1 - h0) * (w1 - w0) if count_include_pad else inside)
    return out


def _divide(dst, src, div, div_tile, then):
    """``src / div`` (``/ then`` too: adaptive pooling divides by the window's height, then width)."""
    if div_tile is None:
        nisa.tensor_scalar(dst=dst, data=src, op0=A.divide, operand0=div,
                           op1=None if then is None else A.divide, operand1=then)
    else:
        nisa.tensor_tensor(dst=dst, data1=src, data2=div_tile[:src.shape[0]], op=A.divide)


def _divisor_tile(div: np.ndarray, parts: int):
    """The per-position divisors on every partition (a constant, broadcast by a stride-0 DMA), or
    None when they are all the same."""
    if (div == div.flat[0]).all():
        return None
    const = nl.shared_constant(div)
    t = nl.ndarray((parts, *div.shape), dtype=F32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=const.ap([[0, parts], [div.shape[1], div.shape[0]], [1, div.shape[1]]]))
    return t


def avg_pool(out, x, *, pool: Pool, div: np.ndarray, then=None):
    out, x = _batched(out), _batched(x)
    ts = taps(pool)
    chunks = plane_chunks([out, x])
    div_tile = _divisor_tile(div, max(c for _, c in chunks))
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        xt = load(x, p0, cnt, (pool.h, pool.w))
        acc = nl.ndarray((cnt, pool.oh, pool.ow), dtype=F32, buffer=nl.sbuf)
        rest = ts
        if ts and covers_all(ts[0], pool):
            nisa.tensor_copy(dst=acc, src=window(xt, ts[0], pool))
            rest = ts[1:]
        else:
            nisa.memset(acc, 0.0, engine=nisa.engine.gpsimd)
        for t in rest:
            nisa.tensor_tensor(dst=rect(acc, t), data1=rect(acc, t), data2=window(xt, t, pool), op=A.add)
        res = nl.ndarray((cnt, pool.oh, pool.ow), dtype=out.dtype, buffer=nl.sbuf)
        _divide(res, acc, float(div.flat[0]), div_tile, then)
        nisa.dma_copy(dst=planes(out, p0, cnt), src=res)


def avg_pool_backward(gi, go, *, pool: Pool, div: np.ndarray, then=None):
    gi, go = _batched(gi), _batched(go)
    ts = taps(pool)
    chunks = plane_chunks([gi, go])
    div_tile = _divisor_tile(div, max(c for _, c in chunks))
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        g = load(go, p0, cnt, (pool.oh, pool.ow))
        delta = nl.ndarray((cnt, pool.oh, pool.ow), dtype=F32, buffer=nl.sbuf)
        _divide(delta, g, float(div.flat[0]), div_tile, then)
        acc = nl.ndarray((cnt, pool.h, pool.w), dtype=F32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0, engine=nisa.engine.gpsimd)
        for t in reversed(ts):
            dst = window(acc, t, pool)
            nisa.tensor_tensor(dst=dst, data1=dst, data2=rect(delta, t), op=A.add)
        _store(gi, p0, cnt, acc)


# ---------------------------------------------------------------- adaptive average pooling


def adaptive_windows(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """ATen's adaptive windows: ``[floor(o * n_in / n_out), ceil((o + 1) * n_in / n_out))``."""
    return [(o * n_in // n_out, -(-(o + 1) * n_in // n_out)) for o in range(n_out)]


def adaptive_pool(out, x, *, h, w, oh, ow):
    out, x = _batched(out), _batched(x)
    rows, cols = adaptive_windows(h, oh), adaptive_windows(w, ow)
    chunks = plane_chunks([out, x])
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        xt = load(x, p0, cnt, (h, w))
        res = nl.ndarray((cnt, oh, ow), dtype=out.dtype, buffer=nl.sbuf)
        for a, (r0, r1) in enumerate(rows):
            for b, (c0, c1) in enumerate(cols):
                s = nl.ndarray((cnt, 1), dtype=F32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=s, op=A.add, data=xt[:, r0:r1, c0:c1], axis=(1, 2))
                nisa.tensor_scalar(dst=res[:, a, b:b + 1], data=s, op0=A.divide, operand0=float(r1 - r0),
                                   op1=A.divide, operand1=float(c1 - c0))
        nisa.dma_copy(dst=planes(out, p0, cnt), src=res)


def adaptive_pool_backward(gi, go, *, h, w, oh, ow):
    gi, go = _batched(gi), _batched(go)
    rows, cols = adaptive_windows(h, oh), adaptive_windows(w, ow)
    chunks = plane_chunks([gi, go])
    for i in nl.affine_range(len(chunks)):
        p0, cnt = chunks[i]
        g = load(go, p0, cnt, (oh, ow))
        delta = nl.ndarray((cnt, oh, ow), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=delta, data=g, op0=A.divide, operand0=1.0)  # fp32 copy
        acc = nl.ndarray((cnt, h, w), dtype=F32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0, engine=nisa.engine.gpsimd)
        for a, (r0, r1) in enumerate(rows):
            for b, (c0, c1) in enumerate(cols):
                d = nl.ndarray((cnt, 1), dtype=F32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=d, data=delta[:, a, b:b + 1], op0=A.divide, operand0=float(r1 - r0),
                                   op1=A.divide, operand1=float(c1 - c0))
                win = acc[:, r0:r1, c0:c1]
                nisa.tensor_scalar(dst=win, data=win, op0=A.add, operand0=d)
        _store(gi, p0, cnt, acc)


# ---------------------------------------------------------------- planners


def _two(values, default=None) -> tuple[int, int] | None:
    values = list(values) if values is not None else []
    if not values:
        return default
    values = [int(v) for v in values]
    if len(values) > 2:
        return None
    return (values[0], values[-1])


def _planes_ok(x, out) -> bool:
    return (x.dtype in FLOAT_DTYPES and out.dtype == x.dtype and x.dim() in (3, 4)
            and x.shape[-2] * x.shape[-1] <= PLANE_ELEMS and out.shape[-2] * out.shape[-1] <= PLANE_ELEMS
            and x.shape[-2] * x.shape[-1] < 2**24)


def _pool_of(x, out, kernel, stride, padding, dilation=(1,)) -> Pool | None:
    k = _two(kernel)
    s = _two(stride, k)
    p, d = _two(padding, (0, 0)), _two(dilation, (1, 1))
    if None in (k, s, p, d) or min(*k, *s, *d) < 1 or min(p) < 0:
        return None
    h, w = x.shape[-2:]
    return Pool(h, w, out.shape[-2], out.shape[-1], k[0], k[1], s, p, d)


@native("aten::max_pool2d_with_indices.default")
def plan_max_pool(call: Call) -> Launch | None:
    x = call.inputs[0]
    out, idx = call.outputs
    if not _planes_ok(x, out):
        return None
    pool = _pool_of(x, out, *(call.arg(i, n) for i, n in ((1, "kernel_size"), (2, "stride"), (3, "padding"),
                                                          (4, "dilation"))))
    if pool is None or not taps(pool):
        return None
    return Launch(max_pool, (OUT(0), OUT(1), IN(0)), {"pool": pool})


@native("aten::max_pool2d_with_indices_backward.default")
def plan_max_pool_backward(call: Call) -> Launch | None:
    if len(call.inputs) != 3:
        return None
    go, x, idx = call.inputs
    if not _planes_ok(x, go) or go.shape[:-2] != x.shape[:-2] or idx.shape != go.shape:
        return None
    pool = _pool_of(x, go, *(call.arg(i, n) for i, n in ((2, "kernel_size"), (3, "stride"), (4, "padding"),
                                                         (5, "dilation"))))
    if pool is None or idx.dtype is not torch.int64:
        return None
    return Launch(max_pool_backward, (OUT(0), IN(0), IN(2)), {"pool": pool})


def _avg_args(call: Call, first: int):
    names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
    return [call.arg(first + i, n, d) for i, (n, d) in enumerate(zip(names, ((), (), (0,), False, True, None),
                                                                      strict=True))]


@native("aten::avg_pool2d.default")
def plan_avg_pool(call: Call) -> Launch | None:
    x, out = call.inputs[0], call.outputs[0]
    kernel, stride, padding, _, include, override = _avg_args(call, 1)
    if not _planes_ok(x, out):
        return None
    pool = _pool_of(x, out, kernel, stride, padding)
    if pool is None:
        return None
    div = divisors(pool, include, override)
    return Launch(avg_pool, (OUT(0), IN(0)), {"pool": pool, "div": div})


@native("aten::avg_pool2d_backward.default")
def plan_avg_pool_backward(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    go, x = call.inputs
    kernel, stride, padding, _, include, override = _avg_args(call, 2)
    if not _planes_ok(x, go) or go.dtype != x.dtype:
        return None
    pool = _pool_of(x, go, kernel, stride, padding)
    if pool is None:
        return None
    div = divisors(pool, include, override)
    return Launch(avg_pool_backward, (OUT(0), IN(0)), {"pool": pool, "div": div})


def _adaptive(x, y, launch_body, operands) -> Launch | None:
    if not _planes_ok(x, y):
        return None
    (h, w), (oh, ow) = x.shape[-2:], y.shape[-2:]
    if h % oh == 0 and w % ow == 0:  # regular windows: average pooling with kernel = stride
        pool = Pool(h, w, oh, ow, h // oh, w // ow, (h // oh, w // ow), (0, 0), (1, 1))
        div = np.full((oh, ow), float(h // oh), dtype=np.float32)
        body = avg_pool if launch_body == "forward" else avg_pool_backward
        return Launch(body, operands, {"pool": pool, "div": div, "then": float(w // ow)})
    if oh * ow > MAX_WINDOWS:
        return None
    body = adaptive_pool if launch_body == "forward" else adaptive_pool_backward
    return Launch(body, operands, {"h": h, "w": w, "oh": oh, "ow": ow})


@native("aten::_adaptive_avg_pool2d.default")
def plan_adaptive_avg_pool(call: Call) -> Launch | None:
    return _adaptive(call.inputs[0], call.outputs[0], "forward", (OUT(0), IN(0)))


@native("aten::_adaptive_avg_pool2d_backward.default")
def plan_adaptive_avg_pool_backward(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    go, x = call.inputs
    if go.dtype != x.dtype:
        return None
    return _adaptive(x, go, "backward", (OUT(0), IN(0)))
