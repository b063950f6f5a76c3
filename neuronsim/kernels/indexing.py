"""Gathers and selections by index or mask: ``index_select`` (the embedding forward),
``embedding_dense_backward``, ``gather``, ``masked_fill`` and ``where``.

These kernels do not use the simulator's indirect DMA (``.ap(vector_offset=...)``, DMA_COPY_INDIRECT)
yet: no DMA address here depends on an index *value*. A row gather is then what NKI embedding
kernels do for small vocabularies: a one-hot matmul on TensorE.

- ``index_select(table [V, D], 0, idx [N])``: the indices are DMA'd broadcast across the V
  partitions (their low int32 words: an int64 operand is its word pairs, see ``bridge.py``),
  VectorE compares them with a GpSimd ``iota`` of the row numbers, giving ``onehot[v, n]`` — the
  stationary operand — and ``nc_matmul(stationary=onehot, moving=table rows)`` gives the ``[N, D]``
  rows in PSUM, accumulated over 128-row chunks of the table. ``1 * x + 0 + ...`` is exact in fp32
  PSUM (bf16/fp16 products are exact too), except that ``0 * inf`` is NaN: a table with inf/NaN
  runs on the host (a per-call check, ``Launch.admit``), as does any out-of-range index, so ATen
  raises its own error. ``-0.0`` rows come out as ``+0.0``.
- ``embedding_dense_backward``: the transpose, a scatter-add: tokens on the partitions, ``onehot[n,
  v]`` (iota along the free dim) is the stationary and the grad rows the moving operand; PSUM
  accumulates the ``[V, D]`` sums over token chunks in token order, in fp32, rounded once.
- ``gather`` along a row of at most ``GATHER_ROW_MAX`` elements, a few (``GATHER_COLUMNS_MAX``)
  per row: rows on the partitions, a compare with a column iota and a ``select``-sum per gathered
  column (as ``loss.py`` picks targets); ``-0.0`` comes out as ``+0.0``.
- ``masked_fill`` / ``where``: element-wise tiles (``elementwise.py``'s tile loop, broadcasting by
  stride-0 DMA) and one VectorE ``select``, which copies bits when the operands have the output's
  dtype (NaN, inf, -0.0 exact) and converts through fp32 otherwise (ATen's type promotion).

Beyond ``V_MAX`` table rows the one-hot costs more than it is worth (a real kernel would use
indirect DMA): those signatures fall back, as do integer tables, ``scale_grad_by_freq`` and index
or table layouts whose dims do not coalesce into one walk.
"""

from __future__ import annotations

import itertools
import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import BIT_DTYPES, _as_dtype, _scalar, launch_on
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.softmax import row_tiles
from neuronsim.kernels.tiling import PARTITIONS, coalesce
from neuronsim.sim.ir import AluOp

Tensor = torch.Tensor
A = AluOp
F32 = nl.float32
P = PARTITIONS
INDEX_DTYPES = (torch.int64, torch.int32)
V_MAX = 8192  # one-hot rows: 64 chunks of 128
MM_FREE = nl.tile_size.gemm_moving_fmax  # moving free size of one matmul: one PSUM bank of fp32
PSUM_TILES = 4  # [128, 512] fp32 accumulators live at once: half of PSUM, the rest for overlap
RESIDENT_BYTES = 64 * 1024  # per partition: a table this small is loaded once and kept in SBUF
MAX_STEPS = 4096  # matmuls + loads of one Program; past this the op falls back


# ---------------------------------------------------------------- index tensors and value checks


class IndexWords:
    """Where an index tensor's values are: the int32 word of each element (an int64's low word:
    little-endian, values checked to fit), in logical order. Tiles are loaded as fp32 (the DMA
    converts; exact below 2**24), the dtype VectorE compares in. Dims that walk memory as one take
    one DMA per tile; others (a broadcast index, ``position_ids.expand(batch, -1)``) one DMA per run
    of the innermost dim (at most ``MAX_RUNS`` per tile)."""

    MAX_RUNS = 16

    def __init__(self, view, wide: bool):
        dims = view.dims[:-1] if wide else view.dims
        sizes, (steps,) = coalesce([tuple(dims)])
        self.view, self.offset = view, view.offset
        self.sizes, self.steps = (tuple(sizes), tuple(steps)) if sizes else ((1,), (0,))
        self.count = math.prod(self.sizes)
        self.inner, self.step = self.sizes[-1], self.steps[-1]
        if len(self.sizes) > 1 and -(-min(P, self.count) // self.inner) + 1 > self.MAX_RUNS:
            raise Declined("the index tensor's dims do not coalesce and its rows are short")

    def _runs(self, n0: int, n: int):
        """(position in the tile, HBM offset, length) of the innermost-dim runs of elements ``n0 ..
        n0+n``."""
        at = 0
        while at < n:
            outer, k = divmod(n0 + at, self.inner)
            length = min(self.inner - k, n - at)
            offset, rest = self.offset + k * self.step, outer
            for size, step in zip(reversed(self.sizes[:-1]), reversed(self.steps[:-1]), strict=True):
                rest, i = divmod(rest, size)
                offset += i * step
            yield at, offset, length
            at += length

    def column(self, n0: int, p: int, into=None):
        """Elements ``n0 .. n0+p`` as a ``[p, 1]`` tile (one per partition), or into ``into``."""
        t = nl.ndarray((p, 1), dtype=F32, buffer=nl.sbuf) if into is None else into
        for at, offset, length in self._runs(n0, p):
            nisa.dma_copy(dst=t[at:at + length],
                          src=self.view.ap([[self.step, length], [1, 1]], offset=offset))
        return t

    def row(self, n0: int, n: int, partitions: int, into=None):
        """Elements ``n0 .. n0+n`` along the free dim of ``partitions`` partitions (stride-0 DMA)."""
        t = nl.ndarray((partitions, n), dtype=F32, buffer=nl.sbuf) if into is None else into
        for at, offset, length in self._runs(n0, n):
            src = self.view.ap([[0, partitions], [self.step, length]], offset=offset)
            nisa.dma_copy(dst=t[:, at:at + length], src=src)
        return t


def indices_within(h: Tensor, n: int, ignore: int | None = None) -> bool:
    """Whether every value of index tensor ``h`` (a host view, as ``Launch.admit`` gets) other than
    ``ignore`` is in ``[0, n)``."""
    if ignore is not None:
        h = h[h != ignore]
    return h.numel() == 0 or (int(h.min()) >= 0 and int(h.max()) < n)


def all_finite(h: Tensor) -> bool:
    """Whether no value of float tensor ``h`` (a host view) is inf or NaN: one float64 sum (which
    propagates both and cannot overflow on 16- or 32-bit floats) instead of an elementwise mask, 20x
    faster."""
    return bool(torch.isfinite(h.sum(dtype=torch.float64)))


def _one_walk(dims_per_view, what: str) -> tuple[int, list[int]]:
    """(size, step per view) of dims that coalesce into at most one walk; declines otherwise."""
    sizes, steps = coalesce(dims_per_view)
    if len(sizes) > 1:
        raise Declined(f"{what} do not coalesce into one walk")
    return (sizes[0], [st[0] for st in steps]) if sizes else (1, [0 for _ in dims_per_view])


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def _hot_dtype(dtype):
    """The one-hot's dtype: TensorE pairs fp32 only with fp32; 16-bit tables take their own."""
    return F32 if dtype == nl.float32 else dtype


# ---------------------------------------------------------------- index_select


def index_select_kernel(out, table, index, *, dim, wide):
    """``out[..., n, ...] = table[..., index[n], ...]`` as one-hot matmuls (rows of ``dim`` on the
    contraction partitions, the trailing dims along the free axis)."""
    words = IndexWords(index, wide)
    n_rows, n_idx = table.shape[dim], out.shape[dim]
    d, (o_dstep,) = _one_walk([out.dims[dim + 1:]], "the output's trailing dims")
    t_sizes, (t_steps,) = coalesce([table.dims[dim + 1:]])  # more than one walk: whole rows per DMA
    t_trail = [[st, n] for st, n in zip(t_steps, t_sizes, strict=True)] or [[1, 1]]
    outer, outer_steps = coalesce([table.dims[:dim], out.dims[:dim]])
    t_vstep, o_nstep = table.dims[dim][0], out.dims[dim][0]
    v_chunks, n_chunks, d_chunks = _chunks(n_rows, P), _chunks(n_idx, P), _chunks(d, MM_FREE)
    resident = len(v_chunks) * d * table.dtype.itemsize <= RESIDENT_BYTES
    if len(t_trail) > 1 and not resident and len(d_chunks) > PSUM_TILES:
        raise Declined("a streamed table's trailing dims do not coalesce")
    steps = math.prod(outer) * len(n_chunks) * len(v_chunks) * (len(d_chunks) + (0 if resident else 1))
    if steps > MAX_STEPS:
        raise Declined(f"{steps} steps")
    hot_dtype = _hot_dtype(table.dtype)
    pv = min(P, n_rows)
    row_ids = nl.ndarray((pv, len(v_chunks)), dtype=F32, buffer=nl.sbuf)
    nisa.iota(row_ids, pattern=[[P, len(v_chunks)]], offset=0, channel_multiplier=1)  # p + 128 j

    def load_rows(t_base, v0, vc, c0, cs):
        t = nl.ndarray((vc, cs), dtype=table.dtype, buffer=nl.sbuf)
        trail = t_trail if cs == d else [[t_trail[0][0], cs]]  # a column range: one walk
        src = table.ap([[t_vstep, vc], *trail], offset=t_base + v0 * t_vstep + c0 * t_trail[0][0])
        nisa.dma_copy(dst=t, src=src)
        return t

    for idx in itertools.product(*(range(n) for n in outer)):
        t_base = table.offset + sum(i * s for i, s in zip(idx, outer_steps[0], strict=True))
        o_base = out.offset + sum(i * s for i, s in zip(idx, outer_steps[1], strict=True))
        kept = [load_rows(t_base, v0, vc, 0, d) for v0, vc in v_chunks] if resident else None
        for n0, nc in n_chunks:
            ids = words.row(n0, nc, pv)
            hots = []
            for j, (_, vc) in enumerate(v_chunks):  # onehot[v, n] = (index[n] == v0 + v)
                h = nl.ndarray((vc, nc), dtype=hot_dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=h, data=ids[:vc], op0=A.equal, operand0=row_ids[:vc, j:j + 1])
                hots.append(h)
            for block in range(0, len(d_chunks), PSUM_TILES):
                group = d_chunks[block:block + PSUM_TILES]
                accs = [nl.ndarray((nc, cs), dtype=F32, buffer=nl.psum) for _, cs in group]
                lo, hi = group[0][0], group[-1][0] + group[-1][1]
                for j, (v0, vc) in enumerate(v_chunks):
                    rows = kept[j][:, lo:hi] if resident else load_rows(t_base, v0, vc, lo, hi - lo)
                    for acc, (c0, cs) in zip(accs, group, strict=True):
                        nisa.nc_matmul(dst=acc, stationary=hots[j], moving=rows[:, c0 - lo:c0 - lo + cs])
                res = nl.ndarray((nc, hi - lo), dtype=out.dtype, buffer=nl.sbuf)
                for acc, (c0, cs) in zip(accs, group, strict=True):
                    nisa.tensor_copy(dst=res[:, c0 - lo:c0 - lo + cs], src=acc)
                dst = out.ap([[o_nstep, nc], [o_dstep, hi - lo]], offset=o_base + n0 * o_nstep + lo * o_dstep)
                nisa.dma_copy(dst=dst, src=res)


@native("aten::index_select.default")
def plan_index_select(call: Call) -> Launch | None:
    table, index = call.inputs if len(call.inputs) == 2 else (None, None)
    if table is None or table.dim() == 0 or index.dtype not in INDEX_DTYPES or index.dim() > 1:
        return None
    dim = call.arg(1, "dim") % table.dim()
    n_rows = table.shape[dim]
    if table.dtype not in FLOAT_DTYPES or call.outputs[0].dtype != table.dtype or not 0 < n_rows <= V_MAX:
        return None

    def admit(inputs):
        return indices_within(inputs[1], n_rows) and all_finite(inputs[0])

    flops = 2.0 * n_rows * math.prod(call.outputs[0].shape)
    return Launch(index_select_kernel, (OUT(0), IN(0), IN(1)),
                  {"dim": dim, "wide": index.dtype is torch.int64}, flops=flops, admit=admit)


# ---------------------------------------------------------------- embedding_dense_backward


def embedding_backward_kernel(out, grad, index, *, wide, padding_idx):
    """``out[v] = sum over n with index[n] == v of grad[n]``: tokens on the contraction partitions,
    ``onehot[n, v]`` the stationary, grad rows the moving operand, sums accumulated in PSUM."""
    words = IndexWords(index, wide)
    n_rows, d = out.shape
    n_tok, (g_nstep,) = _one_walk([grad.dims[:-1]], "the grad's leading dims")
    if n_tok != words.count:
        raise Declined("grad rows and indices differ in number")
    g_dstep = grad.dims[-1][0]
    units = [(v0, vc, c0, cs) for v0, vc in _chunks(n_rows, P) for c0, cs in _chunks(d, MM_FREE)]
    passes = [units[i:i + PSUM_TILES] for i in range(0, len(units), PSUM_TILES)]
    t_chunks = _chunks(n_tok, P)
    if len(passes) * len(t_chunks) * (PSUM_TILES + 2) > MAX_STEPS:
        raise Declined("too many steps")
    hot_dtype = _hot_dtype(grad.dtype)
    pt = min(P, n_tok)
    cols = nl.ndarray((pt, n_rows), dtype=F32, buffer=nl.sbuf)
    nisa.iota(cols, pattern=[[1, n_rows]], offset=0, channel_multiplier=0)  # v along the free dim
    if 0 <= padding_idx < n_rows:  # its grad stays zero: a column no index equals
        nisa.memset(cols[:, padding_idx:padding_idx + 1], -1.0)
    for unit_group in passes:
        accs = [nl.ndarray((vc, cs), dtype=F32, buffer=nl.psum) for _, vc, _, cs in unit_group]
        v_lo = unit_group[0][0]
        v_hi = max(v0 + vc for v0, vc, _, _ in unit_group)
        for t0, tc in t_chunks:
            ids = words.column(t0, tc)
            hot = nl.ndarray((tc, v_hi - v_lo), dtype=hot_dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=hot, data=cols[:tc, v_lo:v_hi], op0=A.equal, operand0=ids)
            g = nl.ndarray((tc, d), dtype=grad.dtype, buffer=nl.sbuf)
            src = grad.ap([[g_nstep, tc], [g_dstep, d]], offset=grad.offset + t0 * g_nstep)
            nisa.dma_copy(dst=g, src=src)
            for acc, (v0, vc, c0, cs) in zip(accs, unit_group, strict=True):
                nisa.nc_matmul(dst=acc, stationary=hot[:, v0 - v_lo:v0 - v_lo + vc], moving=g[:, c0:c0 + cs])
        for acc, (v0, vc, c0, cs) in zip(accs, unit_group, strict=True):
            res = nl.ndarray((vc, cs), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out.ap([[d, vc], [1, cs]], offset=out.offset + v0 * d + c0), src=res)


@native("aten::embedding_dense_backward.default")
def plan_embedding_backward(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    grad, index = call.inputs
    n_rows, padding_idx = call.arg(2, "num_weights"), call.arg(3, "padding_idx")
    out = call.outputs[0]
    if (
        call.arg(4, "scale_grad_by_freq") or grad.dtype not in FLOAT_DTYPES or out.dtype != grad.dtype
        or index.dtype not in INDEX_DTYPES or not 0 < n_rows <= V_MAX or not out.is_contiguous()
        or grad.dim() != index.dim() + 1 or tuple(grad.shape[:-1]) != tuple(index.shape)
    ):
        return None

    def admit(inputs):
        return indices_within(inputs[1], n_rows) and all_finite(inputs[0])

    return Launch(embedding_backward_kernel, (OUT(0), IN(0), IN(1)),
                  {"wide": index.dtype is torch.int64, "padding_idx": padding_idx},
                  flops=2.0 * n_rows * grad.numel(), admit=admit)


# ---------------------------------------------------------------- gather


def gather_kernel(out, x, index, *, dim, wide):
    """``out[.., j, ..] = x[.., index[.., j, ..], ..]`` along ``dim``: rows (the other dims) on the
    partitions, ``x``'s row along the free axis; per gathered column a VectorE compare of a column
    iota with the index and a ``select`` of ``x`` summed along the row (0 elsewhere: exact, and
    NaN/inf elsewhere in the row stay out)."""
    lo = index.ap([list(d) for d in index.dims[:-1]], offset=index.offset) if wide else index
    # x restricted to the index's extent in the other dims (gather allows a smaller index there)
    x_dims = [list(d) if k == dim else [d[0], n]
              for k, (d, n) in enumerate(zip(x.dims, out.shape, strict=True))]
    xr = x.ap(x_dims, offset=x.offset)
    c, k = x.shape[dim], out.shape[dim]
    rows = row_tiles([out, xr, lo], dim)
    if len(rows) * k > MAX_STEPS:
        raise Declined("too many steps")
    cols = nl.ndarray((min(P, rows[0].p), c), dtype=F32, buffer=nl.sbuf)
    nisa.iota(cols, pattern=[[1, c]], offset=0, channel_multiplier=0)
    for i in nl.affine_range(len(rows)):
        row = rows[i]
        p = row.p
        xt = nl.ndarray((p, c), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=row.cols(1, 0, c))
        ids = nl.ndarray((p, k), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=row.cols(2, 0, k))
        picked = nl.ndarray((p, k), dtype=F32, buffer=nl.sbuf)
        for j in range(k):
            mask = nl.ndarray((p, c), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=mask, data=cols[:p], op0=A.equal, operand0=ids[:, j:j + 1])
            sel = nl.ndarray((p, c), dtype=F32, buffer=nl.sbuf)
            nisa.select_reduce(dst=sel, predicate=mask, on_true=xt, on_false=0.0,
                               reduce_res=picked[:, j:j + 1], reduce_op=A.add)
        res = nl.ndarray((p, k), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=picked)
        nisa.dma_copy(dst=row.cols(0, 0, k), src=res)


GATHER_COLUMNS_MAX = 64  # gathered per row: each costs two VectorE passes over the row
GATHER_ROW_MAX = 4096  # elements of a row kept in SBUF (fp32: 16 KiB per partition)


def plan_gather_rows(call: Call) -> Launch | None:
    """The select-sum gather of float rows (``index_dma.plan_gather`` registers ``gather`` and falls
    back to the indirect DMA for what this does not take)."""
    if len(call.inputs) != 2 or call.kwargs.get("sparse_grad") or (len(call.args) > 3 and call.args[3]):
        return None
    x, index = call.inputs
    out = call.outputs[0]
    if (x.dim() == 0 or index.dim() != x.dim() or index.dtype is not torch.int64
            or x.dtype not in FLOAT_DTYPES):
        return None
    dim = call.arg(1, "dim") % x.dim()
    c = x.shape[dim]
    if not (0 < c <= GATHER_ROW_MAX and index.shape[dim] <= GATHER_COLUMNS_MAX) or out.dtype != x.dtype:
        return None

    def admit(inputs):
        return indices_within(inputs[1], c)

    return Launch(gather_kernel, (OUT(0), IN(0), IN(1)), {"dim": dim, "wide": True},
                  flops=2.0 * c * index.numel(), admit=admit)


# ---------------------------------------------------------------- masked_fill and where


def select(dst, pred, *tiles, on_true=None, on_false=None):
    """``dst = pred ? a : b`` (VectorE select); ``a``/``b`` are the loaded ``tiles`` in order, or the
    constants ``on_true``/``on_false`` (a [P, 1] tile of the output's dtype, so the copy is raw)."""
    it = iter(tiles)
    a = next(it) if on_true is None else None
    b = next(it) if on_false is None else None
    p = dst.shape[0]
    if a is not None:
        other = b if b is not None else nl.full((p, 1), on_false, dtype=dst.dtype)
        nisa.select_reduce(dst=dst, predicate=pred, on_true=a, on_false=other)
    else:  # the constant is the true branch: select with the predicate reversed
        const = nl.full((p, 1), on_true, dtype=dst.dtype)
        nisa.select_reduce(dst=dst, predicate=pred, on_true=b, on_false=const, reverse_pred=True)


def _constant(value, dtype: torch.dtype) -> float | None:
    """``value`` as the output dtype holds it, if a memset writes exactly that; None otherwise."""
    if isinstance(value, bool):
        value = int(value)
    if dtype is torch.bool:
        return float(value != 0)
    if dtype in FLOAT_DTYPES:
        v = _as_dtype(float(value), dtype)
        return v if _as_dtype(_as_dtype(float(value), torch.float32), dtype) == v or math.isnan(v) else None
    info = torch.iinfo(torch.int32 if dtype is torch.int64 else dtype)  # int64: its low words
    return float(value) if isinstance(value, int) and info.min <= value <= info.max else None


def _dtypes_ok(out_dtype, *dtypes) -> bool:
    """Floats mix (the engines convert through fp32); integers only as the output's own dtype."""
    if out_dtype in FLOAT_DTYPES:
        return all(d in FLOAT_DTYPES or d is out_dtype for d in dtypes)
    return out_dtype in (*BIT_DTYPES, torch.int64) and all(d is out_dtype for d in dtypes)


def _position(call: Call, t) -> int | None:
    return next((i for i, u in enumerate(call.inputs) if u is t), None)


# The functional masked_fill overloads never reach the device: ATen composes them as clone + these.
@native("aten::masked_fill_.Scalar", "aten::masked_fill_.Tensor")
def plan_masked_fill(call: Call) -> Launch | None:
    x, mask, value = call.arg(0, "self"), call.arg(1, "mask"), call.arg(2, "value")
    out = call.outputs[0]
    ix, im = _position(call, x), _position(call, mask)
    if ix is None or im is None or mask.dtype is not torch.bool or not _dtypes_ok(out.dtype, x.dtype):
        return None
    if isinstance(value, Tensor) and not value.is_cpu:  # a device scalar: a third, broadcast, input
        if value.dim() != 0 or not _dtypes_ok(out.dtype, value.dtype):
            return None
        return launch_on(call, (OUT(0), IN(ix), IN(im), IN(_position(call, value))), _fill_from_tensor)
    const = _scalar(value)
    const = None if const is None else _constant(const, out.dtype)
    if const is None:
        return None
    return launch_on(call, (OUT(0), IN(ix), IN(im)), _fill_constant, value=const)


def _fill_constant(dst, x, mask, value):
    select(dst, mask, x, on_true=value)


def _fill_from_tensor(dst, x, mask, value):
    select(dst, mask, value, x)


@native("aten::where.self", "aten::where.self_out")
def plan_where(call: Call) -> Launch | None:
    cond, a, b = call.arg(0, "condition"), call.arg(1, "self"), call.arg(2, "other")
    out = call.outputs[0]
    ic = _position(call, cond)
    if ic is None or cond.dtype not in (torch.bool, torch.uint8):
        return None
    operands, consts, dtypes = [OUT(0), IN(ic)], {}, []
    for name, t in (("on_true", a), ("on_false", b)):
        i = _position(call, t)
        if i is not None:
            operands.append(IN(i))
            dtypes.append(t.dtype)
            continue
        v = _scalar(t)  # a CPU 0-dim tensor: a constant of the signature
        consts[name] = None if v is None else _constant(v, out.dtype)
        if consts[name] is None:
            return None
    if len(consts) == 2 or not _dtypes_ok(out.dtype, *dtypes):
        return None
    return launch_on(call, tuple(operands), select, **consts)
