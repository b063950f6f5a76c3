"""Upsampling (and resizing to any size): nearest (``upsample_nearest1d/2d``,
``_upsample_nearest_exact1d/2d``) and (bi)linear (``upsample_linear1d``, ``upsample_bilinear2d``),
forward and backward.

Layout: pooling's (``pool.py``): one image plane per partition, 128 planes per tile, the plane along
the free axis, so every step is one instruction over a tile of planes and a strided window of each.

- Nearest: an output ``s_h x s_w`` times the input's size whose source index is ``o // s`` (what
  ATen's index formulas give for such sizes; checked at trace time against ATen's formula in fp32)
  is ``s_h * s_w`` phases, ``out[:, a::s_h, b::s_w] = x``: one copy each, spread over VectorE, GpSimd
  and ScalarE. The backward sums each input element's ``s_h * s_w`` gradients in ATen's order (row
  by row over the output, fp32): the first phase copied, then one add per phase. Bit-exact.
  Other sizes use the runs below (each run one copy; the backward adds the width's runs, then the
  height's, which may round a sum of more than two gradients differently from ATen's order).
- (Bi)linear: ATen's source indices and weights (``compute_source_index_and_lambda``, fp32, the
  forward's weights rounded to the input's dtype as ATen stores them) are computed at trace time
  and grouped into runs: outputs ``o0 + k * p`` reading inputs ``i0 + k * q`` with one pair of
  weights (``n_out / n_in = p / q``; a whole factor gives one run per phase plus the clamped edges).
  A run is two instructions on a strided window, ``lam0 * x[i0] + lam1 * x[i1]`` (the second a
  ``scalar_tensor_tensor`` adding the first), the width first and then the height, as ATen nests
  them. The backward scatters ``lam * grad`` into a zeroed fp32 accumulator the same way, the
  height then the width (ATen adds the four products per output element instead: the sums round
  differently, within fp32). Sizes needing more than ``MAX_RUNS`` runs per dim run on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.pool import PLANE_ELEMS, load, plane_chunks, planes
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
MAX_RUNS = 64  # per dim: (bi)linear sizes needing more strided runs run on the host
ENGINES = (nisa.vector_engine, nisa.gpsimd_engine, None)  # None: ScalarE (an activation copy)


def as_planes(view):
    """``[N, C, W]`` / ``[N, C, H, W]`` as ``[N, C, H, W]`` (1-d: H = 1)."""
    return view.expand_dim(2) if len(view.shape) == 3 else view


def _copy(k, dst, src):
    engine = ENGINES[k % len(ENGINES)]
    if engine is None:
        nisa.activation(dst=dst, op=ActFunc.copy, data=src)
    else:
        nisa.tensor_copy(dst=dst, src=src, engine=engine)


def upsample(out, x, *, sh, sw):
    out, x = as_planes(out), as_planes(x)
    _, _, h, w = x.shape
    for p0, cnt in plane_chunks([out, x]):
        xt = load(x, p0, cnt, (h, w))
        yt = nl.ndarray((cnt, h * sh, w * sw), dtype=out.dtype, buffer=nl.sbuf)
        for k, (a, b) in enumerate((a, b) for a in range(sh) for b in range(sw)):
            _copy(k, yt[:, a::sh, b::sw], xt)
        nisa.dma_copy(dst=planes(out, p0, cnt), src=yt)


def upsample_backward(gx, gy, *, sh, sw):
    gx, gy = as_planes(gx), as_planes(gy)
    _, _, h, w = gx.shape
    for p0, cnt in plane_chunks([gx, gy]):
        gt = load(gy, p0, cnt, (h * sh, w * sw))
        acc = nl.ndarray((cnt, h, w), dtype=F32, buffer=nl.sbuf)
        phases = [(a, b) for a in range(sh) for b in range(sw)]
        res = nl.ndarray((cnt, h, w), dtype=gx.dtype, buffer=nl.sbuf)
        if len(phases) == 1:
            nisa.tensor_copy(dst=res, src=gt)
        else:
            nisa.tensor_copy(dst=acc, src=gt[:, 0::sh, 0::sw])
            for k, (a, b) in enumerate(phases[1:], start=1):
                last = k == len(phases) - 1
                nisa.tensor_tensor(dst=res if last else acc, data1=acc, data2=gt[:, a::sh, b::sw], op=A.add)
        nisa.dma_copy(dst=planes(gx, p0, cnt), src=res)


def _gather(dst, src, runs, axis):
    """``dst[o] = src[i]`` along ``axis``, run by run (copies spread over three engines)."""
    for k, r in enumerate(runs):
        _copy(k, _along(dst, axis, r.o0, r.ostep, r.n), _along(src, axis, r.i0, r.istep, r.n))


def _add_back(acc, grad, runs, axis):
    """``acc[i] += grad[o]`` along ``axis``, run by run."""
    for r in runs:
        a = _along(acc, axis, r.i0, r.istep, r.n)
        nisa.tensor_tensor(dst=a, data1=a, data2=_along(grad, axis, r.o0, r.ostep, r.n), op=A.add)


def nearest(out, x, *, rows, cols):
    """Any sizes: the columns' runs, then the rows' (``rows`` None: 1-d)."""
    out, x = as_planes(out), as_planes(x)
    _, _, h, w = x.shape
    _, _, oh, ow = out.shape
    for p0, cnt in plane_chunks([out, x]):
        xt = load(x, p0, cnt, (h, w))
        res = nl.ndarray((cnt, oh, ow), dtype=out.dtype, buffer=nl.sbuf)
        t = nl.ndarray((cnt, h, ow), dtype=out.dtype, buffer=nl.sbuf) if rows is not None else res
        _gather(t, xt, cols, 2)
        if rows is not None:
            _gather(res, t, rows, 1)
        nisa.dma_copy(dst=planes(out, p0, cnt), src=res)


def nearest_backward(gx, gy, *, rows, cols):
    """Any sizes: sums over the columns' runs, then the rows' (fp32; ATen adds row by row over the
    output, so sums of more than two terms may round differently)."""
    gx, gy = as_planes(gx), as_planes(gy)
    _, _, h, w = gx.shape
    _, _, oh, _ = gy.shape
    for p0, cnt in plane_chunks([gx, gy]):
        gt = load(gy, p0, cnt, tuple(gy.shape[2:]))
        u = nl.ndarray((cnt, oh, w), dtype=F32, buffer=nl.sbuf)
        nisa.memset(dst=u, value=0.0, engine=nisa.gpsimd_engine)
        _add_back(u, gt, cols, 2)
        if rows is not None:
            acc = nl.ndarray((cnt, h, w), dtype=F32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0, engine=nisa.gpsimd_engine)
            _add_back(acc, u, rows, 1)
            u = acc
        res = nl.ndarray((cnt, h, w), dtype=gx.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=u)
        nisa.dma_copy(dst=planes(gx, p0, cnt), src=res)


# ---------------------------------------------------------------- planners


def aten_source_index(n_in: int, n_out: int, scale, exact: bool) -> np.ndarray:
    """ATen's nearest source index of each output index (UpSample.h: ``nearest_idx`` /
    ``nearest_exact_idx``), the scale in fp32 as ATen's ``float``."""
    o = np.arange(n_out)
    if not exact and n_out == n_in:
        return o
    if not exact and n_out == 2 * n_in:
        return o >> 1
    s = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n_in) / np.float32(n_out)
    src = np.floor((o.astype(np.float32) + np.float32(0.5 if exact else 0.0)) * s).astype(np.int64)
    return np.minimum(src, n_in - 1)


def whole_factor(n_in: int, n_out: int, scale, exact: bool) -> int | None:
    if n_out % n_in:
        return None
    f = n_out // n_in
    return f if np.array_equal(aten_source_index(n_in, n_out, scale, exact), np.arange(n_out) // f) else None


def _sizes(call: Call, dims: int, backward: bool, first_scale: int):
    """(input sizes, output sizes, scales) of the upsampled dims, or None."""
    out_size = call.arg(1, "output_size")
    names = ("scales_h", "scales_w") if dims == 2 else ("scales",)
    scales = [call.arg(first_scale + i, n) for i, n in enumerate(names)]
    in_size = call.arg(2, "input_size") if backward else call.inputs[0].shape
    if out_size is None or len(out_size) != dims or in_size is None:
        return None
    return list(in_size)[-dims:], list(out_size), scales


def _nearest_plan(call: Call, dims: int, exact: bool, backward: bool) -> tuple[Callable, dict] | None:
    """Whole factors: the phase kernels (bit-exact); other sizes: the run kernels."""
    sizes = _sizes(call, dims, backward, 3 if backward else 2)
    if sizes is None:
        return None
    fs = [whole_factor(i, o, s, exact) for i, o, s in zip(*sizes, strict=True)]
    if None not in fs:
        sh, sw = (1, fs[0]) if dims == 1 else fs
        return (upsample_backward if backward else upsample), {"sh": sh, "sw": sw}
    runs = [nearest_runs(i, o, s, exact) for i, o, s in zip(*sizes, strict=True)]
    if None in runs:
        return None
    rows, cols = (None, runs[0]) if dims == 1 else runs
    return (nearest_backward if backward else nearest), {"rows": rows, "cols": cols}


def _dims(call: Call) -> tuple[int, bool, bool]:
    name = call.op.name()
    return (1 if "1d" in name else 2), "exact" in name, "backward" in name


@native("aten::upsample_nearest1d.default", "aten::upsample_nearest2d.default",
        "aten::_upsample_nearest_exact1d.default", "aten::_upsample_nearest_exact2d.default")
def plan_upsample(call: Call) -> Launch | None:
    dims, exact, _ = _dims(call)
    x, out = call.inputs[0], call.outputs[0]
    if len(call.inputs) != 1 or x.dtype not in FLOAT_DTYPES or x.dim() != dims + 2 or out.dtype != x.dtype:
        return None
    plan = _nearest_plan(call, dims, exact, False)
    if plan is None or max(x.numel(), out.numel()) // max(1, x.shape[0] * x.shape[1]) > PLANE_ELEMS:
        return None
    return Launch(plan[0], (OUT(0), IN(0)), plan[1], flops=0.0)


@native("aten::upsample_nearest1d_backward.default", "aten::upsample_nearest2d_backward.default",
        "aten::_upsample_nearest_exact1d_backward.default",
        "aten::_upsample_nearest_exact2d_backward.default")
def plan_upsample_backward(call: Call) -> Launch | None:
    dims, exact, _ = _dims(call)
    g, out = call.inputs[0], call.outputs[0]
    if len(call.inputs) != 1 or g.dtype not in FLOAT_DTYPES or g.dim() != dims + 2 or out.dtype != g.dtype:
        return None
    plan = _nearest_plan(call, dims, exact, True)
    if plan is None or max(g.numel(), out.numel()) // max(1, g.shape[0] * g.shape[1]) > PLANE_ELEMS:
        return None
    return Launch(plan[0], (OUT(0), IN(0)), plan[1], flops=float(g.numel()))


# ---------------------------------------------------------------- (bi)linear


@dataclass(frozen=True)
class Run:
    """Outputs ``o0 + k * ostep`` (k < n) read inputs ``i0 + k * istep`` and ``i0 + k * istep + off``
    with weights ``lam0`` and ``lam1``."""

    o0: int
    ostep: int
    n: int
    i0: int
    istep: int
    off: int
    lam0: float
    lam1: float


def aten_linear_taps(n_in, n_out, align_corners, scale, weight_dtype):
    """ATen's ``compute_source_index_and_lambda`` per output index, in fp32 (UpSample.h): the first
    input index, the second's offset, and the two weights (rounded to ``weight_dtype``)."""
    f32 = np.float32
    if n_out == n_in:
        return [(o, 0, 1.0, 0.0) for o in range(n_out)]
    if align_corners:
        ratio = f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
    else:
        ratio = f32(1.0 / scale) if scale is not None and scale > 0 else f32(n_in) / f32(n_out)
    taps = []
    for o in range(n_out):
        if align_corners:
            real = f32(ratio * f32(o))
        else:
            real = f32(f32(ratio * f32(f32(o) + f32(0.5))) - f32(0.5))
            real = max(real, f32(0))
        i0 = min(int(real), n_in - 1)
        lam1 = min(max(f32(real - f32(i0)), f32(0)), f32(1))
        lam0 = f32(f32(1) - lam1)
        taps.append((i0, 1 if i0 < n_in - 1 else 0, _round(lam0, weight_dtype), _round(lam1, weight_dtype)))
    return taps


def _round(v, dtype) -> float:
    return float(torch.tensor(float(v), dtype=torch.float32).to(dtype).item())


def linear_runs(n_in, n_out, align_corners, scale, weight_dtype) -> tuple[Run, ...] | None:
    return group_runs(aten_linear_taps(n_in, n_out, align_corners, scale, weight_dtype), n_in, n_out)


def nearest_runs(n_in, n_out, scale, exact) -> tuple[Run, ...] | None:
    src = aten_source_index(n_in, n_out, scale, exact)
    return group_runs([(int(i), 0, 1.0, 0.0) for i in src], n_in, n_out)


def group_runs(taps, n_in, n_out) -> tuple[Run, ...] | None:
    """``taps[o] = (i0, off, lam0, lam1)`` as runs of one ``[ostep, istep]`` stride and one pair of
    weights: with ``n_out / n_in = p / q``, each phase ``o mod p`` walked until its index step or
    weights change (None: more than ``MAX_RUNS``)."""
    g = math.gcd(n_in, n_out)
    p, q = n_out // g, n_in // g
    runs = []
    for b in range(min(p, n_out)):
        k = b
        while k < n_out:
            i0, off, l0, l1 = taps[k]
            n = 1
            while k + n * p < n_out and taps[k + n * p] == (i0 + n * q, off, l0, l1):
                n += 1
            runs.append(Run(k, p, n, i0, q, off, l0, l1))
            k += n * p
            if len(runs) > MAX_RUNS:
                return None
    return tuple(runs)


def _along(t, axis, start, step, n):
    sl = slice(start, start + step * (n - 1) + 1, step)
    return t[:, :, sl] if axis == 2 else t[:, sl, :]


def _interpolate(dst, src, runs, axis):
    """``dst[o] = lam0 * src[i0] + lam1 * src[i0 + off]`` along ``axis`` (ATen's order, fp32)."""
    for r in runs:
        d = _along(dst, axis, r.o0, r.ostep, r.n)
        nisa.tensor_scalar(dst=d, data=_along(src, axis, r.i0, r.istep, r.n), op0=A.multiply, operand0=r.lam0)
        nisa.scalar_tensor_tensor(dst=d, data=_along(src, axis, r.i0 + r.off, r.istep, r.n), op0=A.multiply,
                                  operand0=r.lam1, op1=A.add, operand1=d)


def _scatter(acc, grad, runs, axis):
    """``acc[i0] += lam0 * grad[o]``, ``acc[i0 + off] += lam1 * grad[o]`` along ``axis``."""
    for r in runs:
        g = _along(grad, axis, r.o0, r.ostep, r.n)
        for start, lam in ((r.i0, r.lam0), (r.i0 + r.off, r.lam1)):
            a = _along(acc, axis, start, r.istep, r.n)
            nisa.scalar_tensor_tensor(dst=a, data=g, op0=A.multiply, operand0=lam, op1=A.add, operand1=a)


def linear(out, x, *, rows, cols):
    """``rows``/``cols``: the runs of the height (None: 1-d) and the width."""
    out, x = as_planes(out), as_planes(x)
    _, _, h, w = x.shape
    _, _, oh, ow = out.shape
    for p0, cnt in plane_chunks([out, x]):
        xt = load(x, p0, cnt, (h, w))
        res = nl.ndarray((cnt, oh, ow), dtype=out.dtype, buffer=nl.sbuf)
        t = nl.ndarray((cnt, h, ow), dtype=F32, buffer=nl.sbuf) if rows is not None else res
        _interpolate(t, xt, cols, 2)  # the inner (width) sums first, as ATen nests them
        if rows is not None:
            _interpolate(res, t, rows, 1)
        nisa.dma_copy(dst=planes(out, p0, cnt), src=res)


def linear_backward(gx, gy, *, rows, cols):
    gx, gy = as_planes(gx), as_planes(gy)
    _, _, h, w = gx.shape
    _, _, oh, ow = gy.shape
    for p0, cnt in plane_chunks([gx, gy]):
        gt = load(gy, p0, cnt, (oh, ow))
        if rows is not None:  # the heights' sums first: u[h, ow]
            u = nl.ndarray((cnt, h, ow), dtype=F32, buffer=nl.sbuf)
            nisa.memset(dst=u, value=0.0, engine=nisa.gpsimd_engine)
            _scatter(u, gt, rows, 1)
            gt = u
        acc = nl.ndarray((cnt, h, w), dtype=F32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0, engine=nisa.gpsimd_engine)
        _scatter(acc, gt, cols, 2)
        res = nl.ndarray((cnt, h, w), dtype=gx.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=planes(gx, p0, cnt), src=res)


def _linear_runs(call: Call, dims: int, backward: bool, dtype):
    first = 4 if backward else 3
    align = call.arg(first - 1, "align_corners")
    sizes = _sizes(call, dims, backward, first)
    if sizes is None or not isinstance(align, bool):
        return None
    weight_dtype = torch.float32 if backward else dtype  # ATen: the forward's weights in the input's dtype
    runs = [linear_runs(i, o, align, s, weight_dtype) for i, o, s in zip(*sizes, strict=True)]
    if None in runs:
        return None
    return (None, runs[0]) if dims == 1 else (runs[0], runs[1])


@native("aten::upsample_linear1d.default", "aten::upsample_bilinear2d.default",
        "aten::upsample_linear1d_backward.default", "aten::upsample_bilinear2d_backward.default")
def plan_linear(call: Call) -> Launch | None:
    dims, _, backward = _dims(call)
    t, out = call.inputs[0], call.outputs[0]
    if len(call.inputs) != 1 or t.dtype not in FLOAT_DTYPES or t.dim() != dims + 2 or out.dtype != t.dtype:
        return None
    big = max(t.numel(), out.numel()) // max(1, t.shape[0] * t.shape[1])
    runs = _linear_runs(call, dims, backward, t.dtype)
    if runs is None or big > PLANE_ELEMS:
        return None
    body = linear_backward if backward else linear
    return Launch(body, (OUT(0), IN(0)), {"rows": runs[0], "cols": runs[1]}, flops=float(out.numel() * 6))
