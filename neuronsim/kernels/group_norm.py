"""Group normalization: ``native_group_norm`` and ``native_group_norm_backward``.

Layout: one row per (image, group) on the partitions, the group's ``C/G`` channels times ``H*W``
positions (contiguous in NCHW) along the free axis, so the group's statistics are free-axis
reductions on one partition, as in layer norm (``norm.py``). A tile holds whole images (``128 // G``
of them), so every tile's partition ``r`` is group ``r mod G`` and the per-channel parameters are
one ``[rows, C/G]`` tile loaded once (a DMA per image of the tile) for the whole kernel.

A row is walked in chunks of at most ``CHUNK`` elements: whole channels while they fit, else pieces
of one channel. A row of one chunk stays in SBUF between the statistics and the normalization; a
longer one is loaded twice (the second pass streams it again).

Forward: ``bn_stats`` per 512 elements and ``bn_aggr`` give the mean and population variance,
``rstd = rsqrt(var + eps)`` on ScalarE; ``y = x * alpha + beta`` with ``alpha = rstd * w[c]`` and
``beta = b[c] - mean * alpha`` per (row, channel): one ScalarE ``activation`` with per-partition scale
and bias for a piece of one channel, else two VectorE passes with ``alpha``/``beta`` broadcast along
the positions (a stride-0 access pattern, nothing copied).

Backward (ATen's formulas): per (row, channel) ``ds = sum(dy * x)`` and ``db = sum(dy)``; per row
``ds_g = sum_c ds * w``, ``db_g = sum_c db * w``, ``c2 = (db_g * mean - ds_g) * rstd^3 / D``,
``c3 = -c2 * mean - db_g * rstd / D`` and ``dx = rstd * w[c] * dy + c2 * x + c3``. ``dgamma[c] =
sum_n (ds - db * mean) * rstd`` and ``dbeta[c] = sum_n db`` sum rows of the same group across
partitions: TensorE contracts over the partitions with a ``[rows, G]`` selection matrix (``r mod G
== g``, made by ``iota``) as the stationary operand, accumulating every row tile in PSUM (fp32).

Covered: float32 / bfloat16 / float16 contiguous input, weight and bias absent or of the input's
dtype or float32 (autocast's mixed case, where mean and rstd are float32 as ATen-CPU's), ``G <= 128``.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
CHUNK = 4096  # elements per partition of one chunk of a row (fp32: 16 KiB)


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def row_chunks(cpg: int, hw: int) -> list[tuple[int, int, int, int]]:
    """``(c0, cn, s0, sn)``: channels ``c0 .. c0+cn``, positions ``s0 .. s0+sn`` of each."""
    if hw <= CHUNK:
        per = CHUNK // hw
        return [(c0, cn, 0, hw) for c0, cn in _chunks(cpg, per)]
    return [(c, 1, s0, sn) for c in range(cpg) for s0, sn in _chunks(hw, CHUNK)]


class Rows:
    """Rows ``r0 .. r0+p`` of an ``[N*G, cpg, HW]`` contiguous HBM view, chunk by chunk; kept in SBUF
    when the row is one chunk."""

    def __init__(self, view, r0, p, cpg, hw, chunks):
        self.view, self.r0, self.p, self.cpg, self.hw, self.chunks = view, r0, p, cpg, hw, chunks
        self.kept = {} if len(chunks) == 1 else None

    def chunk(self, i):
        if self.kept is not None and i in self.kept:
            return self.kept[i]
        c0, cn, s0, sn = self.chunks[i]
        t = nl.ndarray((self.p, cn, sn), dtype=self.view.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=_rows_view(self.view, self.r0, self.p, self.cpg, self.hw, self.chunks[i]))
        if self.kept is not None:
            self.kept[i] = t
        return t


def _rows_view(view, r0, p, cpg, hw, chunk):
    c0, cn, s0, sn = chunk
    d = cpg * hw
    return view.ap([[d, p], [hw, cn], [1, sn]], offset=view.offset + r0 * d + c0 * hw + s0)


def per_row_params(view, rows, groups, cpg):
    """``t[r, j] = view[(r mod G) * cpg + j]`` as an fp32 ``[rows, cpg]`` tile (DMA casts)."""
    t = nl.ndarray((rows, cpg), dtype=F32, buffer=nl.sbuf)
    for i in range(rows // groups):
        nisa.dma_copy(dst=t[i * groups:(i + 1) * groups],
                      src=view.ap([[cpg, groups], [1, cpg]], offset=view.offset))
    return t


def _per_row(view, r0, p):
    return view.ap([[1, p], [1, 1]], offset=view.offset + r0)


def _column(p, dtype=F32):
    return nl.ndarray((p, 1), dtype=dtype, buffer=nl.sbuf)


def _bcast(t, c0, cn, sn):
    """Columns ``c0 .. c0+cn`` of a ``[p, cpg]`` tile, repeated along ``sn`` positions."""
    return t[:, c0:c0 + cn].expand_dim(2).broadcast(2, sn)


def _affine(dst, src, alpha, beta, chunk):
    """``dst = src * alpha[c] + beta[c]`` on one chunk (alpha, beta: ``[p, cpg]`` fp32)."""
    c0, cn, _, sn = chunk
    if cn == 1:
        nisa.activation(dst=dst[:, 0, :], op=ActFunc.identity, data=src[:, 0, :], scale=alpha[:, c0:c0 + 1],
                        bias=beta[:, c0:c0 + 1])
        return
    tmp = nl.ndarray(src.shape, dtype=F32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=tmp, data1=src, data2=_bcast(alpha, c0, cn, sn), op=A.multiply)
    nisa.tensor_tensor(dst=dst, data1=tmp, data2=_bcast(beta, c0, cn, sn), op=A.add)


# ---------------------------------------------------------------- forward


def group_norm(y, mean, rstd, x, *affine, eps, n, cpg, hw, groups, has_w, has_b):
    P = nl.tile_size.pmax
    FMAX = nl.tile_size.bn_stats_fmax
    it = iter(affine)
    w, b = (next(it) if has else None for has in (has_w, has_b))
    rows, per_tile = n * groups, (P // groups) * groups
    chunks = row_chunks(cpg, hw)
    first = min(per_tile, rows)
    w_t = per_row_params(w, first, groups, cpg) if has_w else None
    b_t = per_row_params(b, first, groups, cpg) if has_b else None
    pieces = [(i, k0, kn) for i, (_, cn, _, sn) in enumerate(chunks) for k0, kn in _chunks(cn * sn, FMAX)]
    for r0 in range(0, rows, per_tile):
        p = min(per_tile, rows - r0)
        xs = Rows(x, r0, p, cpg, hw, chunks)
        stats = nl.ndarray((p, 6 * len(pieces)), dtype=F32, buffer=nl.sbuf)
        for j, (i, k0, kn) in enumerate(pieces):
            flat = xs.chunk(i).reshape((p, chunks[i][1] * chunks[i][3]))
            nisa.bn_stats(dst=stats[:, 6 * j:6 * j + 6], data=flat[:, k0:k0 + kn])
        mv = nl.ndarray((p, 2), dtype=F32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rs = _column(p)
        nisa.activation(dst=rs, op=ActFunc.rsqrt, data=mv[:, 1:2], bias=eps)
        nisa.dma_copy(dst=_per_row(mean, r0, p), src=mv[:, 0:1])
        nisa.dma_copy(dst=_per_row(rstd, r0, p), src=rs)
        alpha = nl.ndarray((p, cpg), dtype=F32, buffer=nl.sbuf)
        if has_w:
            nisa.tensor_scalar(dst=alpha, data=w_t[:p], op0=A.multiply, operand0=rs)
        else:
            nisa.memset(dst=alpha, value=0.0, engine=nisa.gpsimd_engine)
            nisa.tensor_scalar(dst=alpha, data=alpha, op0=A.add, operand0=rs)
        beta = nl.ndarray((p, cpg), dtype=F32, buffer=nl.sbuf)
        neg_mean = _column(p)
        nisa.tensor_scalar(dst=neg_mean, data=mv[:, 0:1], op0=A.multiply, operand0=-1.0)
        if has_b:
            nisa.scalar_tensor_tensor(dst=beta, data=alpha, op0=A.multiply, operand0=neg_mean, op1=A.add,
                                      operand1=b_t[:p])
        else:
            nisa.tensor_scalar(dst=beta, data=alpha, op0=A.multiply, operand0=neg_mean)
        for i in nl.affine_range(len(chunks)):
            xt = xs.chunk(i)
            yt = nl.ndarray(xt.shape, dtype=y.dtype, buffer=nl.sbuf)
            _affine(yt, xt, alpha, beta, chunks[i])
            nisa.dma_copy(dst=_rows_view(y, r0, p, cpg, hw, chunks[i]), src=yt)


# ---------------------------------------------------------------- backward


def selection(rows, groups):
    """``sel[r, g] = (r mod G == g)`` (fp32 ones and zeros), the stationary operand of the group sums."""
    P = nl.tile_size.pmax
    v = nl.ndarray((rows, groups), dtype=F32, buffer=nl.sbuf)
    nisa.iota(v, pattern=[[-1, groups]], offset=groups * P, channel_multiplier=1)  # G*P + r - g >= 0
    nisa.tensor_scalar(dst=v, data=v, op0=A.mod, operand0=float(groups), op1=A.equal, operand1=0.0)
    return v


def _group_sums(acc, sel, part):
    """``acc[g, j] += sum over rows r of group g of part[r, j]`` (TensorE, PSUM accumulates)."""
    COLS = nl.tile_size.gemm_moving_fmax
    p = part.shape[0]
    for c0, cn in _chunks(part.shape[1], COLS):
        nisa.nc_matmul(dst=acc[:, c0:c0 + cn], stationary=sel[:p], moving=part[:, c0:c0 + cn])


def _store_groups(dst, acc, groups, cpg):
    t = nl.ndarray((groups, cpg), dtype=dst.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=acc)
    nisa.dma_copy(dst=dst.ap([[cpg, groups], [1, cpg]], offset=dst.offset), src=t)


def group_norm_backward(*views, n, cpg, hw, groups, has_w, want):
    P = nl.tile_size.pmax
    views = list(views)
    outs = {k: views.pop(0) for k in ("dx", "dw", "db") if want[k]}
    dy, x, mean, rstd = (views.pop(0) for _ in range(4))
    w = views.pop(0) if has_w else None
    rows, per_tile, d = n * groups, (P // groups) * groups, cpg * hw
    chunks = row_chunks(cpg, hw)
    first = min(per_tile, rows)
    w_t = per_row_params(w, first, groups, cpg) if has_w else None
    sel = selection(first, groups) if want["dw"] or want["db"] else None
    acc_w = nl.ndarray((groups, cpg), dtype=F32, buffer=nl.psum) if want["dw"] else None
    acc_b = nl.ndarray((groups, cpg), dtype=F32, buffer=nl.psum) if want["db"] else None
    for r0 in range(0, rows, per_tile):
        p = min(per_tile, rows - r0)
        xs, dys = Rows(x, r0, p, cpg, hw, chunks), Rows(dy, r0, p, cpg, hw, chunks)
        mu, rs = _column(p), _column(p)
        nisa.dma_copy(dst=mu, src=_per_row(mean, r0, p))
        nisa.dma_copy(dst=rs, src=_per_row(rstd, r0, p))
        ds, db = (nl.ndarray((p, cpg), dtype=F32, buffer=nl.sbuf) for _ in range(2))
        for i in range(len(chunks)):
            c0, cn, s0, _ = chunks[i]
            xt, dyt = xs.chunk(i), dys.chunk(i)
            prod = nl.ndarray(xt.shape, dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=prod, data1=dyt, data2=xt, op=A.multiply, engine=nisa.gpsimd_engine)
            if s0 == 0:  # the channel's first piece: write its sums
                nisa.tensor_reduce(dst=ds[:, c0:c0 + cn], op=A.add, data=prod, axis=2)
                nisa.tensor_reduce(dst=db[:, c0:c0 + cn], op=A.add, data=dyt, axis=2)
            else:  # a later piece of one channel: add
                part = _column(p)
                nisa.tensor_reduce(dst=part, op=A.add, data=prod, axis=2)
                nisa.tensor_tensor(dst=ds[:, c0:c0 + 1], data1=ds[:, c0:c0 + 1], data2=part, op=A.add)
                nisa.tensor_reduce(dst=part, op=A.add, data=dyt, axis=2)
                nisa.tensor_tensor(dst=db[:, c0:c0 + 1], data1=db[:, c0:c0 + 1], data2=part, op=A.add)
        if want["dw"]:  # (ds - db * mean) * rstd, summed over the images of each group
            part = nl.ndarray((p, cpg), dtype=F32, buffer=nl.sbuf)
            neg_mean = _column(p)
            nisa.tensor_scalar(dst=neg_mean, data=mu, op0=A.multiply, operand0=-1.0)
            nisa.scalar_tensor_tensor(dst=part, data=db, op0=A.multiply, operand0=neg_mean, op1=A.add,
                                      operand1=ds)
            nisa.tensor_scalar(dst=part, data=part, op0=A.multiply, operand0=rs)
            _group_sums(acc_w, sel, part)
        if want["db"]:
            _group_sums(acc_b, sel, db)
        if want["dx"]:
            _input_gradient(outs["dx"], xs, dys, chunks, (r0, p, cpg, hw, d), mu, rs, ds, db,
                            None if w_t is None else w_t[:p])
    if want["dw"]:
        _store_groups(outs["dw"], acc_w, groups, cpg)
    if want["db"]:
        _store_groups(outs["db"], acc_b, groups, cpg)


def _input_gradient(dx, xs, dys, chunks, where, mu, rs, ds, db, w_t):
    r0, p, cpg, hw, d = where
    if w_t is not None:  # ds_g = sum_c ds * w, db_g = sum_c db * w
        for t in (ds, db):
            nisa.tensor_tensor(dst=t, data1=t, data2=w_t, op=A.multiply)
    ds_g, db_g = _column(p), _column(p)
    nisa.tensor_reduce(dst=ds_g, op=A.add, data=ds, axis=1)
    nisa.tensor_reduce(dst=db_g, op=A.add, data=db, axis=1)
    c2, c3, r3 = _column(p), _column(p), _column(p)
    nisa.scalar_tensor_tensor(dst=r3, data=rs, op0=A.multiply, operand0=rs, op1=A.multiply, operand1=rs)
    nisa.scalar_tensor_tensor(dst=c2, data=db_g, op0=A.multiply, operand0=mu, op1=A.subtract, operand1=ds_g)
    nisa.tensor_scalar(dst=c2, data=c2, op0=A.multiply, operand0=r3, op1=A.multiply, operand1=1.0 / d)
    nisa.tensor_scalar(dst=c3, data=db_g, op0=A.multiply, operand0=rs, op1=A.multiply, operand1=-1.0 / d)
    t = _column(p)
    nisa.tensor_tensor(dst=t, data1=c2, data2=mu, op=A.multiply)
    nisa.tensor_tensor(dst=c3, data1=c3, data2=t, op=A.subtract)  # -c2 * mean - db_g * rstd / D
    scale = None
    if w_t is not None:
        scale = nl.ndarray((p, cpg), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scale, data=w_t, op0=A.multiply, operand0=rs)
    for i in nl.affine_range(len(chunks)):
        c0, cn, _, sn = chunks[i]
        xt, dyt = xs.chunk(i), dys.chunk(i)
        lin = nl.ndarray(xt.shape, dtype=F32, buffer=nl.sbuf)
        nisa.activation(dst=lin.reshape((p, cn * sn)), op=ActFunc.identity, data=xt.reshape((p, cn * sn)),
                        scale=c2, bias=c3)
        res = nl.ndarray(xt.shape, dtype=dx.dtype, buffer=nl.sbuf)
        if scale is None:
            nisa.scalar_tensor_tensor(dst=res, data=dyt, op0=A.multiply, operand0=rs, op1=A.add, operand1=lin)
        else:
            g = nl.ndarray(xt.shape, dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=g, data1=dyt, data2=_bcast(scale, c0, cn, sn), op=A.multiply)
            nisa.tensor_tensor(dst=res, data1=g, data2=lin, op=A.add)
        nisa.dma_copy(dst=_rows_view(dx, r0, p, cpg, hw, chunks[i]), src=res)


# ---------------------------------------------------------------- planners


def _position(call: Call, t) -> int:
    return next(i for i, u in enumerate(call.inputs) if u is t)


def _param_ok(t, x, c) -> bool:
    return t is None or (t.dim() == 1 and t.numel() == c and t.is_contiguous()
                         and t.dtype in (x.dtype, torch.float32))


def _geometry(x, n, c, hw, groups):
    ok = (x.dtype in FLOAT_DTYPES and x.is_contiguous() and isinstance(groups, int) and 0 < groups
          <= nl.tile_size.pmax and c % groups == 0 and n * c * hw == x.numel() > 0)
    return ok


@native("aten::native_group_norm.default")
def plan_group_norm(call: Call) -> Launch | None:
    x, w, b = call.arg(0, "input"), call.arg(1, "weight"), call.arg(2, "bias")
    n, c, hw, groups, eps = (call.arg(i, nm) for i, nm in enumerate(("N", "C", "HxW", "group", "eps"), 3))
    if not all(isinstance(v, int) for v in (n, c, hw)) or not _geometry(x, n, c, hw, groups):
        return None
    y, mean, rstd = call.outputs
    if not (_param_ok(w, x, c) and _param_ok(b, x, c)) or not math.isfinite(eps) or y.dtype != x.dtype:
        return None
    if not (y.is_contiguous() and mean.is_contiguous() and rstd.is_contiguous()):
        return None
    params = [t for t in (w, b) if t is not None]
    mixed = x.dtype != torch.float32 and any(t.dtype == torch.float32 for t in params)
    saved = torch.float32 if mixed else x.dtype  # ATen-CPU: the parameters' dtype where they differ
    return Launch(group_norm, (OUT(0), OUT(1), OUT(2), IN(0), *(IN(_position(call, t)) for t in params)),
                  {"eps": float(eps), "n": n, "cpg": c // groups, "hw": hw, "groups": groups,
                   "has_w": w is not None, "has_b": b is not None},
                  flops=float(x.numel() * 8), output_dtypes=(y.dtype, saved, saved))


@native("aten::native_group_norm_backward.default")
def plan_group_norm_backward(call: Call) -> Launch | None:
    names = ("grad_out", "input", "mean", "rstd", "weight", "N", "C", "HxW", "group", "output_mask")
    dy, x, mean, rstd, w, n, c, hw, groups, mask = (call.arg(i, nm) for i, nm in enumerate(names))
    want = dict(zip(("dx", "dw", "db"), map(bool, mask), strict=True))
    if len(call.outputs) != sum(want.values()) or not any(want.values()):
        return None
    if not all(isinstance(v, int) for v in (n, c, hw)) or not _geometry(x, n, c, hw, groups):
        return None
    if dy.dtype != x.dtype or dy.shape != x.shape or not dy.is_contiguous() or not _param_ok(w, x, c):
        return None
    if not all(t.is_contiguous() and t.numel() == n * groups and t.dtype in FLOAT_DTYPES
               for t in (mean, rstd)):
        return None
    if not all(o.is_contiguous() for o in call.outputs):
        return None
    ins = [t for t in (dy, x, mean, rstd, w) if t is not None]
    return Launch(group_norm_backward, (*(OUT(i) for i in range(len(call.outputs))),
                                        *(IN(_position(call, t)) for t in ins)),
                  {"n": n, "cpg": c // groups, "hw": hw, "groups": groups, "has_w": w is not None,
                   "want": want},
                  flops=float(x.numel() * 10),
                  result=None if all(want.values()) else (lambda outs: _masked(outs, want)))


def _masked(outs, want) -> tuple:
    it = iter(outs)
    return tuple(next(it) if want[k] else None for k in ("dx", "dw", "db"))
