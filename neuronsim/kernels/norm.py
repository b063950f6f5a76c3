"""Layer normalization: ``native_layer_norm`` and ``native_layer_norm_backward``.

Rows (the leading dims) go on the partitions, 128 per tile; a row's normalized elements (the last
dims, flattened to ``n``) lie along the free axis, so every per-row statistic is a free-dim
reduction on one partition:

- mean and variance: VectorE ``bn_stats`` per 512-element chunk, combined by ``bn_aggr``
  (population variance, as ATen);
- ``rstd = rsqrt(var + eps)`` on ScalarE; ``xhat = x * rstd + (-mean * rstd)`` is one ScalarE
  ``activation`` with per-partition scale and bias, leaving VectorE free for the affine step;
- weight and bias are loaded once, broadcast across partitions by a stride-0 partition DMA.

The backward's ``grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat))`` (``g = dy * w``) is
again per row. ``grad_weight = sum_rows(dy * xhat)`` and ``grad_bias = sum_rows(dy)`` reduce across
rows, i.e. across partitions, which VectorE cannot do: TensorE contracts over the partitions, so
``nc_matmul(stationary=tile[rows, 128 cols], moving=ones[rows, 1])`` gives 128 column sums on 128
PSUM partitions, and successive row tiles accumulate into the same PSUM column (no SBUF round
trips). Products and sums stay fp32 (fp32 matmul for ``dy * xhat``); outputs round once.

Covered: float32 / bfloat16 / float16, ``n <= N_MAX``, inputs whose normalized dims are one walk
(rows in any layout: a ``[B, C, T]`` conv output transposed to ``[B, T, C]`` takes a tile per
``B`` index, :func:`row_walk`), weight and bias contiguous
of the input's dtype or absent. ``mean``/``rstd`` have the device's (meta) dtype, float32, as on
CUDA.

RMSNorm (``_fused_rms_norm`` and its backward) is the same row layout without the mean: the sum of
squares is one ScalarE ``activation(square)`` accumulating into a [p, 1] column, ``rstd =
rsqrt(sum / n + eps)`` one more ScalarE instruction, and ``y = x * rstd * w`` one VectorE
``scalar_tensor_tensor``. The backward's ``grad_input = rstd * (g - xhat * mean(g * xhat))`` is
layer_norm's without the ``mean(g)`` term, with rstd folded into ``g`` so ScalarE only makes xhat;
the two full-tile products that feed a reduction (``dy * xhat`` for grad_weight's TensorE column
sums, ``g * xhat`` for the row mean) run on GpSimd, which leaves VectorE, the busiest engine, three
passes per tile. Both kernels are software-pipelined by one row tile (:func:`pipelined`): the next
tile's loads are issued before this tile's stores, so the in-order DMA queues keep streaming
(2048 x 1024 fp32 forward: 97 -> 63 us, DMA-bound). ATen's
composite upcasts 16-bit inputs to fp32 and rounds once, as the engines do; ``eps=None`` is fp32's
epsilon (the compute dtype's). ``rms_norm`` is CompositeImplicitAutograd, so the device's op table
routes the calls :func:`rms_norm_uncovered` accepts to these two kernels through an autograd
Function (``_fused_rms_norm_backward`` has no CPU kernel: the check must be complete) and lets the
rest decompose.
"""

from __future__ import annotations

import itertools
import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import coalesce
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
N_MAX = 4096  # normalized elements per row: the backward keeps ~8 fp32 rows per partition in SBUF


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def _rows(view, r0: int, p: int, n: int, strides: tuple[int, int] | None = None):
    """Rows ``r0 .. r0+p`` of a ``[rows, n]`` HBM view, as a ``[p, n]`` pattern: contiguous, or with
    ``strides`` (row, column) — a broadcast gradient (``y.sum().backward()``) has both 0."""
    rs, cs = strides or (n, 1)
    return view.ap([[rs, p], [cs, n]], offset=view.offset + r0 * rs)


def _collapse(dims) -> int | None:
    """The one stride of dims (size, stride) that walk memory as one dim (0 if none), else None."""
    dims = [(s, st) for s, st in dims if s != 1]
    for (_, outer), (size, inner) in zip(dims, dims[1:], strict=False):
        if outer != inner * size:
            return None
    return dims[-1][1] if dims else 0


MAX_ROW_TILES = 1024


def row_walk(ts, n: int):
    """Row tiles of same-shape tensors ``ts`` seen as ``[rows, n]`` whose rows need not be one walk
    (a ``[B, C, T]`` conv output transposed to ``[B, T, C]``, a broadcast gradient): per tile of at
    most 128 rows within the innermost row dim, ``(first row, rows, offset per tensor, row step per
    tensor, column step per tensor)``; None if a tensor's normalized dims are not one walk."""
    P = nl.tile_size.pmax
    k = next((i for i in range(ts[0].dim() + 1) if math.prod(ts[0].shape[i:]) == n), None)
    if k is None:
        return None
    cols = tuple(_collapse(zip(t.shape[k:], t.stride()[k:], strict=True)) for t in ts)
    if any(c is None for c in cols):
        return None
    sizes, steps = coalesce([tuple((t.stride(d), t.shape[d]) for d in range(k)) for t in ts])
    if not sizes:
        sizes, steps = (1,), [[0] for _ in ts]
    *outer, inner = sizes
    if math.prod(outer) * -(-inner // P) > MAX_ROW_TILES:
        return None
    tiles, r = [], 0
    for idx in itertools.product(*(range(m) for m in outer)):
        base = [sum(i * s for i, s in zip(idx, st, strict=False)) for st in steps]
        for i0 in range(0, inner, P):
            starts = tuple(b + i0 * st[-1] for b, st in zip(base, steps, strict=True))
            tiles.append((r + i0, min(P, inner - i0), starts, tuple(st[-1] for st in steps), cols))
        r += inner
    return tiles


def _tile_rows(view, tile, k: int, n: int):
    """Tensor ``k``'s rows of a :func:`row_walk` tile as a ``[p, n]`` pattern."""
    _, p, offsets, row_steps, col_steps = tile
    return view.ap([[row_steps[k], p], [col_steps[k], n]], offset=view.offset + offsets[k])


def _per_row(view, r0: int, p: int):
    """``p`` per-row values (mean, rstd: one element per row) as a ``[p, 1]`` pattern."""
    return view.ap([[1, p], [1, 1]], offset=view.offset + r0)


def _broadcast(view, p: int, n: int, dtype=None):
    """A length-``n`` vector on ``p`` partitions: one DMA with a stride-0 partition pattern."""
    t = nl.ndarray((p, n), dtype=dtype or view.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=view.ap([[0, p], [1, n]], offset=view.offset))
    return t


def _normalize(xt, mean, rstd, dst):
    """``dst = (x - mean) * rstd`` as one ScalarE activation: ``x * rstd + (-mean * rstd)``."""
    p = xt.shape[0]
    nmr = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=nmr, data=mean, op0=A.multiply, operand0=-1.0, op1=A.multiply,
                              operand1=rstd)
    nisa.activation(dst=dst, op=ActFunc.identity, data=xt, scale=rstd, bias=nmr)


# ---------------------------------------------------------------- forward


def layer_norm(y, mean, rstd, x, *affine, eps, rows, n, has_w, has_b, x_walk=None):
    P = nl.tile_size.pmax  # rows per tile: the partitions
    it = iter(affine)
    w = next(it) if has_w else None
    b = next(it) if has_b else None
    pw = min(P, rows)
    w_t = _broadcast(w, pw, n) if has_w else None
    b_t = _broadcast(b, pw, n) if has_b else None

    def load(tile):
        if x_walk is None:  # contiguous rows
            r0 = tile
            xt = nl.ndarray((min(P, rows - r0), n), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt, src=_rows(x, r0, xt.shape[0], n))
            return r0, xt
        xt = nl.ndarray((tile[1], n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=_tile_rows(x, tile, 0, n))
        return tile[0], xt

    def normalize(state):
        r0, xt = state
        p = xt.shape[0]
        yt, mu, rs = normalize_rows(xt, w_t, b_t, eps, y.dtype)
        nisa.dma_copy(dst=_rows(y, r0, p, n), src=yt)
        nisa.dma_copy(dst=_per_row(mean, r0, p), src=mu)  # DMA casts to mean's dtype
        nisa.dma_copy(dst=_per_row(rstd, r0, p), src=rs)

    pipelined(x_walk or list(range(0, rows, P)), load, normalize)


def normalize_rows(xt, w_t, b_t, eps, dtype):
    """One row tile: ``(y, mean, rstd)`` of the rows of ``xt`` [p, n] in SBUF (y of ``dtype``; mean
    and rstd [p, 1] fp32). The kernel above loads and stores; a fused region (``kernels/fused.py``)
    passes its point-wise prologue's result as ``xt`` and its epilogue takes ``y``."""
    BN_FMAX = nl.tile_size.bn_stats_fmax  # elements per partition bn_stats reads at most
    p, n = xt.shape
    chunks = _chunks(n, BN_FMAX)
    stats = nl.ndarray((p, 6 * len(chunks)), dtype=F32, buffer=nl.sbuf)
    for k, (c0, cs) in enumerate(chunks):
        nisa.bn_stats(dst=stats[:, 6 * k:6 * k + 6], data=xt[:, c0:c0 + cs])
    mv = nl.ndarray((p, 2), dtype=F32, buffer=nl.sbuf)  # (mean, variance)
    nisa.bn_aggr(dst=mv, data=stats)
    rs = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
    nisa.activation(dst=rs, op=ActFunc.rsqrt, data=mv[:, 1:2], bias=eps)
    yt = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
    has_w, has_b = w_t is not None, b_t is not None
    xh = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf) if has_w or has_b else yt
    _normalize(xt, mv[:, 0:1], rs, xh)
    if has_w:
        nisa.tensor_tensor(dst=xh if has_b else yt, data1=xh, data2=w_t[:p], op=A.multiply)
    if has_b:  # on GpSimd: VectorE, with bn_stats and the weight's product, is the bottleneck
        nisa.tensor_tensor(dst=yt, data1=xh, data2=b_t[:p], op=A.add, engine=nisa.gpsimd_engine)
    return yt, mv[:, 0:1], rs


def _position(call: Call, t) -> int:
    """Index of tensor ``t`` among the call's inputs (by identity: ``==`` would compare values)."""
    return next(i for i, u in enumerate(call.inputs) if u is t)


def _affine_ok(t, x, n: int) -> bool:
    return t is None or (t.dtype == x.dtype and t.numel() == n and t.is_contiguous())


@native("aten::native_layer_norm.default")
def plan_layer_norm(call: Call) -> Launch | None:
    x = call.arg(0, "input")
    shape = list(call.arg(1, "normalized_shape"))
    w, b = call.arg(2, "weight"), call.arg(3, "bias")
    eps = float(call.arg(4, "eps"))
    n = math.prod(shape)
    rows = x.numel() // n if n else 0
    y, mean, rstd = call.outputs
    x_walk = None if x.is_contiguous() or not 0 < n else row_walk([x], n)
    if (
        x.dtype not in FLOAT_DTYPES or (x_walk is None and not x.is_contiguous()) or not 0 < n <= N_MAX
        or not (_affine_ok(w, x, n) and _affine_ok(b, x, n))
        or not (y.is_contiguous() and mean.is_contiguous() and rstd.is_contiguous())
        or mean.numel() != rows or not math.isfinite(eps)
    ):
        return None
    ins = [t for t in (x, w, b) if t is not None]
    operands = (OUT(0), OUT(1), OUT(2), *(IN(_position(call, t)) for t in ins))
    return Launch(layer_norm, operands, {"eps": eps, "rows": rows, "n": n, "x_walk": x_walk,
                                         "has_w": w is not None, "has_b": b is not None},
                  flops=float(rows * n * (8 if w is not None else 6)),
                  output_dtypes=(y.dtype, x.dtype, x.dtype))  # mean, rstd in x's dtype, as ATen-CPU


# ---------------------------------------------------------------- backward


def column_sums(acc, src, ones):
    """``acc[c, j] += sum_rows(src[:, j*128 + c])`` on TensorE (``src.T @ ones``, PSUM accumulates)."""
    COLS = nl.tile_size.gemm_stationary_fmax  # columns per matmul: the stationary's free size
    p = src.shape[0]
    for j, (c0, cs) in enumerate(_chunks(src.shape[1], COLS)):
        nisa.nc_matmul(dst=acc[:cs, j:j + 1], stationary=src[:, c0:c0 + cs], moving=ones[:p])


def _store_columns(dst, acc, n: int):
    """Write the PSUM column sums (column ``j*128 + c`` at ``acc[c, j]``) to the length-``n`` ``dst``."""
    COLS = nl.tile_size.gemm_stationary_fmax  # columns per matmul: the stationary's free size
    t = nl.ndarray(acc.shape, dtype=dst.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=acc)
    full, tail = divmod(n, COLS)
    if full:
        nisa.dma_copy(dst=dst.ap([[1, COLS], [COLS, full]], offset=dst.offset), src=t[:, :full])
    if tail:
        nisa.dma_copy(dst=dst.ap([[1, tail], [1, 1]], offset=dst.offset + full * COLS),
                      src=t[:tail, full:full + 1])


def layer_norm_backward(*views, rows, n, has_w, want, walk):
    P = nl.tile_size.pmax  # rows per tile: the partitions
    views = list(views)
    outs = {k: views.pop(0) for k in ("dx", "dw", "db") if want[k]}
    dy, x, mean, rstd = views[:4]
    w = views[4] if has_w else None
    pw = min(P, rows)
    w_t = _broadcast(w, pw, n) if has_w else None
    sums = column_sum_accumulators(want, n, pw, dy.dtype)
    for t in nl.affine_range(len(walk)):
        tile = walk[t]
        r0, p = tile[0], tile[1]
        xt = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.sbuf)
        dyt = nl.ndarray((p, n), dtype=dy.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=_tile_rows(x, tile, 0, n))
        nisa.dma_copy(dst=dyt, src=_tile_rows(dy, tile, 1, n))
        mt = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
        rs = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=mt, src=_per_row(mean, r0, p))
        nisa.dma_copy(dst=rs, src=_per_row(rstd, r0, p))
        dxt = grad_rows(dyt, xt, mt, rs, w_t, want, sums, outs["dx"].dtype if want["dx"] else F32)
        if dxt is not None:
            nisa.dma_copy(dst=_rows(outs["dx"], r0, p, n), src=dxt)
    store_column_sums(sums, outs, n)


def column_sum_accumulators(want, n, pw, dy_dtype) -> dict:
    """PSUM accumulators (and their ones vectors) of grad_weight / grad_bias, as ``want`` asks."""
    COLS = nl.tile_size.gemm_stationary_fmax  # columns per matmul: the stationary's free size
    sums = {}
    for k, dtype in (("dw", F32), ("db", dy_dtype)):  # ones of the summed tile's dtype (TensorE pairs)
        if want[k]:
            acc = nl.ndarray((min(COLS, n), -(-n // COLS)), dtype=F32, buffer=nl.psum)
            sums[k] = (acc, nl.ones((pw, 1), dtype=dtype, buffer=nl.sbuf))
    return sums


def store_column_sums(sums: dict, outs: dict, n: int) -> None:
    for k, (acc, _) in sums.items():
        _store_columns(outs[k], acc, n)


def grad_rows(dyt, xt, mt, rs, w_t, want, sums, dtype):
    """One row tile of the backward: accumulates grad_weight/grad_bias into ``sums`` and returns
    grad_input's rows (of ``dtype``; None if not wanted). Hooks as in :func:`normalize_rows`."""
    p, n = xt.shape
    xh = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
    _normalize(xt, mt, rs, xh)
    tmp = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
    if want["dw"]:
        nisa.tensor_tensor(dst=tmp, data1=dyt, data2=xh, op=A.multiply)
        column_sums(sums["dw"][0], tmp, sums["dw"][1])
    if want["db"]:
        column_sums(sums["db"][0], dyt, sums["db"][1])
    if not want["dx"]:
        return None
    g = dyt
    if w_t is not None:
        g = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=g, data1=dyt, data2=w_t[:p], op=A.multiply)
    c0 = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)  # -mean(g)
    c1 = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)  # -mean(g * xhat)
    nisa.tensor_reduce(dst=c0, op=A.add, data=g, axis=1)
    nisa.tensor_scalar(dst=c0, data=c0, op0=A.multiply, operand0=-1.0 / n)
    nisa.tensor_tensor(dst=tmp, data1=g, data2=xh, op=A.multiply)
    nisa.tensor_reduce(dst=c1, op=A.add, data=tmp, axis=1)
    nisa.tensor_scalar(dst=c1, data=c1, op0=A.multiply, operand0=-1.0 / n)
    nisa.scalar_tensor_tensor(dst=tmp, data=xh, op0=A.multiply, operand0=c1, op1=A.add, operand1=g)
    dxt = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=dxt, data=tmp, op0=A.add, operand0=c0, op1=A.multiply, operand1=rs)
    return dxt


@native("aten::native_layer_norm_backward.default")
def plan_layer_norm_backward(call: Call) -> Launch | None:
    dy, x = call.arg(0, "grad_out"), call.arg(1, "input")
    shape = list(call.arg(2, "normalized_shape"))
    mean, rstd, w, b = (call.arg(i, name) for i, name in
                        ((3, "mean"), (4, "rstd"), (5, "weight"), (6, "bias")))
    mask = list(call.arg(7, "output_mask"))
    n = math.prod(shape)
    rows = x.numel() // n if n else 0
    want = dict(zip(("dx", "dw", "db"), map(bool, mask), strict=True))
    # Only the results the mask asks for are tensors; the registry passes those, in order.
    if len(call.outputs) != sum(want.values()) or not any(want.values()):
        return None
    # (views: a transposed x, a broadcast dy)
    walk = row_walk([x, dy], n) if 0 < n and dy.shape == x.shape else None
    if (
        x.dtype not in FLOAT_DTYPES or dy.dtype != x.dtype or walk is None or not 0 < n <= N_MAX
        or not _affine_ok(w, x, n) or (b is not None and b.dtype != x.dtype)
        or any(t.dtype not in FLOAT_DTYPES or t.numel() != rows or not t.is_contiguous()
               for t in (mean, rstd))
        or not all(o.is_contiguous() for o in call.outputs)
        or ((want["dw"] or want["db"]) and w is None)
    ):
        return None
    operands = (*(OUT(i) for i in range(len(call.outputs))),
                *(IN(_position(call, t)) for t in (dy, x, mean, rstd, w) if t is not None))
    # No bias (nanoGPT's LayerNorm) or no affine: the meta kernel's results have Nones where the
    # mask is False; ``result`` puts the kernel's outputs in their places.
    complete = all(want.values())
    return Launch(layer_norm_backward, operands,
                  {"rows": rows, "n": n, "has_w": w is not None, "want": want, "walk": walk},
                  flops=float(rows * n * 12),
                  result=None if complete else lambda outs: _masked(outs, want, ("dx", "dw", "db")))


# ---------------------------------------------------------------- RMSNorm


def rms_norm(y, rstd, x, *weight, eps, rows, n):
    P = nl.tile_size.pmax  # rows per tile: the partitions
    w_t = _broadcast(weight[0], min(P, rows), n) if weight else None

    def load(r0):
        xt = nl.ndarray((min(P, rows - r0), n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=_rows(x, r0, xt.shape[0], n))
        return r0, xt

    def normalize(r0, xt):
        p = xt.shape[0]
        yt = nl.ndarray((p, n), dtype=y.dtype, buffer=nl.sbuf)
        ss = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
        # The squares themselves are not needed: yt takes them until the result overwrites it.
        nisa.activation(dst=yt, op=ActFunc.square, data=xt, reduce_op=A.add, reduce_res=ss)
        rs = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
        nisa.activation(dst=rs, op=ActFunc.rsqrt, data=ss, scale=1.0 / n, bias=eps)
        if w_t is None:
            nisa.tensor_scalar(dst=yt, data=xt, op0=A.multiply, operand0=rs)
        else:
            nisa.scalar_tensor_tensor(dst=yt, data=xt, op0=A.multiply, operand0=rs, op1=A.multiply,
                                      operand1=w_t[:p])
        nisa.dma_copy(dst=_rows(y, r0, p, n), src=yt)
        nisa.dma_copy(dst=_per_row(rstd, r0, p), src=rs)

    pipelined(list(range(0, rows, P)), load, lambda state: normalize(*state))


def pipelined(starts, first, second):
    """``second(first(r0))`` for each row tile, software-pipelined by one tile: the DMA queues and
    engines run their instructions in program order, so tile i + 1's loads (and first-half work)
    are issued before tile i's stores, which wait for its compute, rather than behind them."""
    pending = None
    for i in nl.affine_range(len(starts)):
        state = first(starts[i])
        if pending is not None:
            second(pending)
        pending = state
    if pending is not None:
        second(pending)


def rms_norm_backward(*views, rows, n, has_w, want):
    P = nl.tile_size.pmax  # rows per tile: the partitions
    views = list(views)
    outs = {k: views.pop(0) for k in ("dx", "dw") if want[k]}
    dy, x, rstd = views[:3]
    pw = min(P, rows)
    w_t = _broadcast(views[3], pw, n) if has_w and want["dx"] else None
    sums = column_sum_accumulators({**want, "db": False}, n, pw, dy.dtype)

    def first_half(r0):
        """Loads, xhat, grad_weight's part, and ``gs = rstd * dy * w``."""
        p = min(P, rows - r0)
        xt = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.sbuf)
        dyt = nl.ndarray((p, n), dtype=dy.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=_rows(x, r0, p, n))
        nisa.dma_copy(dst=dyt, src=_rows(dy, r0, p, n))
        rs = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=rs, src=_per_row(rstd, r0, p))
        xh = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
        nisa.activation(dst=xh, op=ActFunc.identity, data=xt, scale=rs)
        if want["dw"]:  # on GpSimd, into its own tile: VectorE's chain neither waits nor races
            prod = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=prod, data1=dyt, data2=xh, op=A.multiply, engine=nisa.engine.gpsimd)
            column_sums(sums["dw"][0], prod, sums["dw"][1])
        return (r0, xh, scaled_grad(dyt, rs, w_t)) if want["dx"] else None

    def second_half(state):
        r0, xh, gs = state
        nisa.dma_copy(dst=_rows(outs["dx"], r0, xh.shape[0], n), src=rms_grad_rows(gs, xh, outs["dx"].dtype))

    # VectorE issues tile i + 1's gs before the rest of tile i, which waits for GpSimd's product.
    pipelined(list(range(0, rows, P)), first_half, second_half if want["dx"] else lambda state: None)
    store_column_sums(sums, outs, n)


def scaled_grad(dyt, rs, w_t):
    """``gs = rstd * dy * w`` (fp32): grad_input's ``rstd * g`` with rstd folded in, so ScalarE's
    only full-tile work is xhat and it runs ahead to the next tile."""
    gs = nl.ndarray(dyt.shape, dtype=F32, buffer=nl.sbuf)
    if w_t is None:
        nisa.activation(dst=gs, op=ActFunc.identity, data=dyt, scale=rs)
    else:
        nisa.scalar_tensor_tensor(dst=gs, data=dyt, op0=A.multiply, operand0=rs, op1=A.multiply,
                                  operand1=w_t[:dyt.shape[0]])
    return gs


def rms_grad_rows(gs, xh, dtype):
    """``grad_input = gs - xhat * mean(gs * xhat)`` (of ``dtype``): the same as
    ``rstd * (g - xhat * mean(g * xhat))`` with ``g = dy * w``."""
    p, n = xh.shape
    tmp = nl.ndarray((p, n), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=tmp, data1=gs, data2=xh, op=A.multiply, engine=nisa.engine.gpsimd)
    k = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf)  # -mean(gs * xhat)
    nisa.tensor_reduce(dst=k, op=A.add, data=tmp, axis=1)
    nisa.tensor_scalar(dst=k, data=k, op0=A.multiply, operand0=-1.0 / n)
    dxt = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=dxt, data=xh, op0=A.multiply, operand0=k, op1=A.add, operand1=gs)
    return dxt


def rms_norm_uncovered(x, normalized_shape, weight, eps) -> str | None:
    """Why the fused RMSNorm kernels (forward *and* backward) do not take this call; None: they do.
    The op table asks before routing ``rms_norm`` to them; invalid calls are uncovered, so the
    composite raises ATen's own error."""
    if not isinstance(x, torch.Tensor) or x.is_cpu or x.layout is not torch.strided:
        return "not a dense device tensor"
    if x.dtype not in FLOAT_DTYPES or not x.is_contiguous() or x.numel() == 0:
        return f"{x.dtype} input, contiguous={x.is_contiguous()}, numel={x.numel()}"
    shape = list(normalized_shape)
    if not shape or len(shape) > x.dim() or list(x.shape[-len(shape):]) != shape:
        return f"normalized_shape {shape} is not the trailing dims of {list(x.shape)}"
    if math.prod(shape) > N_MAX:
        return f"rows of more than {N_MAX} elements"
    if weight is not None and (not isinstance(weight, torch.Tensor) or weight.is_cpu
                               or weight.dtype != x.dtype or list(weight.shape) != shape
                               or not weight.is_contiguous()):
        return "weight not a contiguous device tensor of the input's dtype and normalized_shape"
    if eps is not None and not math.isfinite(eps):
        return "eps not finite"
    return None


def rms_eps(eps) -> float:
    """``eps=None``: the epsilon of the compute dtype, fp32 (ATen's composite upcasts 16-bit inputs)."""
    return torch.finfo(torch.float32).eps if eps is None else float(eps)


@native("aten::_fused_rms_norm.default")
def plan_rms_norm(call: Call) -> Launch | None:
    names = ("input", "normalized_shape", "weight", "eps")
    x, shape, w, eps = (call.arg(i, name) for i, name in enumerate(names))
    if rms_norm_uncovered(x, shape, w, eps) is not None or call.outputs[1].dtype != torch.float32:
        return None
    n = math.prod(shape)
    ins = [t for t in (x, w) if t is not None]
    return Launch(rms_norm, (OUT(0), OUT(1), *(IN(_position(call, t)) for t in ins)),
                  {"eps": rms_eps(eps), "rows": x.numel() // n, "n": n},
                  flops=float(x.numel() * (4 if w is not None else 3)))


@native("aten::_fused_rms_norm_backward.default")
def plan_rms_norm_backward(call: Call) -> Launch | None:
    dy, x, shape, rstd, w = (call.arg(i, name) for i, name in
                             enumerate(("grad_out", "input", "normalized_shape", "rstd", "weight")))
    want = dict(zip(("dx", "dw"), map(bool, call.arg(5, "output_mask")), strict=True))
    n = math.prod(shape)
    if (
        rms_norm_uncovered(x, shape, w, None) is not None or not any(want.values())
        or (want["dw"] and w is None) or len(call.outputs) != sum(want.values())
        or dy.dtype != x.dtype or dy.shape != x.shape or not dy.is_contiguous()
        or rstd.dtype != torch.float32 or rstd.numel() != x.numel() // n or not rstd.is_contiguous()
    ):
        return None
    ins = [t for t in (dy, x, rstd, w) if t is not None]
    # The meta kernel's results are (grad_input or None, grad_weight or None): the kernel writes the
    # wanted ones, in order.
    return Launch(rms_norm_backward, (*(OUT(i) for i in range(len(call.outputs))),
                                      *(IN(_position(call, t)) for t in ins)),
                  {"rows": x.numel() // n, "n": n, "has_w": w is not None, "want": want},
                  flops=float(x.numel() * 8), result=lambda outs: _masked(outs, want, ("dx", "dw")))


def _masked(outs, want, keys) -> tuple:
    it = iter(outs)
    return tuple(next(it) if want[k] else None for k in keys)
