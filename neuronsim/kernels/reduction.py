"""Reductions: sum, mean, amax/amin, max/min, prod, var/std/var_mean, linalg_vector_norm.

The planner splits the input's dims into kept and reduced ones (each group sorted by stride and
coalesced like ATen's TensorIterator) and picks one of three layouts, as a hand-written NKI
reduction would:

- ``rows``: kept elements on the partitions (128 per tile), reduced elements along the free dim in
  chunks; VectorE ``tensor_reduce`` (or one ScalarE ``activation`` with accumulate, for the squares
  and absolute values of norms and variances) folds each chunk into a column, the columns fold at
  the end. The usual case: reducing the innermost dims (``mean(x, -1)``).
- ``columns``: the kept dim is the innermost one (``sum(dy, 0)`` for a bias gradient: ``[N, C] ->
  [C]``), so reduced elements go on the partitions and kept ones along the free dim. Sums contract
  over the partitions on TensorE (``tile.T @ ones`` accumulating in PSUM, norm.py's column sums);
  max/min/prod fold row tiles element-wise on VectorE, then each 128-column block is transposed on
  TensorE and reduced along the free dim (cheaper than GpSimd's partition reduce, which walks the
  partitions 16 at a time).
- ``spread``: few kept elements and a long reduction (``x.sum()``): each kept element's reduced
  elements are cut into ``[128, F]`` tiles (tiling.py), reduced along the free dim into per-partition
  partials, then folded across the partitions (a ones-matmul for sums, transpose + reduce else).

Results are collected in SBUF and stored with one DMA per walk of the kept dims (a DMA's fixed
cost dwarfs a [128, 1] column). Variance is two-pass, as exact as ATen's Welford: the mean first,
then ``sum((x - mean)^2)`` with one ScalarE ``activation(square, bias=-mean)`` per chunk (rows and
spread layouts only; a reduction over an outer dim then walks its reduced elements with a stride).
Everything accumulates in fp32 and rounds once on the final write (bf16 in, bf16 out, like ATen's opmath).

Covered: float32 / bfloat16 / float16 inputs and outputs (``dtype=`` among those), any dims,
negative dims, keepdim, non-contiguous and expanded inputs. Integer and bool inputs of sum and
max/min (VectorE's fp32 is not exact past 2^24) fold on GpSimd's integer ALU instead:
``int_reduction.py``. The ops with int64 index outputs (``max.dim``, ``min.dim``, ``argmax``,
``argmin``) are ``argreduce.py``'s.
``linalg_vector_norm`` covers ord 2, 1, inf and -inf.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.norm import column_sums
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import FREE_MAX, PARTITIONS, coalesce, elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
P = PARTITIONS
CHUNK = 4096  # reduced elements per partition per load in the rows layout: 16 KiB of fp32
MAX_STEPS = 1024  # loads per kernel; past this (tiny awkward dims) the op falls back
MIN_COLUMNS = 32  # a kept innermost dim narrower than this is not worth the columns layout
RESIDENT_BYTES = 96 * 1024  # per partition: a variance's second pass reuses the loaded tiles
IDENTITY = {A.add: 0.0, A.maximum: -math.inf, A.minimum: math.inf, A.multiply: 1.0,
            A.abs_max: 0.0, A.abs_min: math.inf}


@dataclass(frozen=True)
class Reduction:
    """What to compute: ``post(fold(op, pre(x)))``; ``var`` folds ``(x - mean)^2`` in a second pass."""

    op: AluOp
    pre: ActFunc | None = None  # square / abs before summing (one ScalarE activation per chunk)
    divisor: float | None = None  # mean: n; var: max(n - correction, 0) (set by the planner)
    mean: bool = False  # divide by the count
    correction: float = 1.0  # var: Bessel's correction
    sqrt: bool = False
    var: bool = False
    with_mean: bool = False  # var_mean: the second output is the mean
    count: int = 1  # reduced elements per output element


@dataclass(frozen=True)
class Layout:
    kept: tuple[tuple[int, int, int], ...]  # (size, input step, output step), outermost first
    red: tuple[tuple[int, int], ...]  # (size, input step), outermost first
    scheme: str  # "rows" | "columns" | "spread"


# ---------------------------------------------------------------- the layout (planner side)


def coalesced(dims_per_view):
    """Dims sorted by the first view's step (outermost first) and coalesced."""
    if not dims_per_view[0]:
        return (), [[] for _ in dims_per_view]
    order = sorted(range(len(dims_per_view[0])), key=lambda i: -dims_per_view[0][i][0])
    return coalesce([tuple(dims[i] for i in order) for dims in dims_per_view])


def plan_layout(x, out, dims, keepdim: bool, red: Reduction) -> Layout:
    reduced = {d % x.dim() for d in dims} if x.dim() else set()
    o_strides = list(out.stride())
    kept_x, kept_o, red_x, j = [], [], [], 0
    for d in range(x.dim()):
        pair = (x.stride(d), x.shape[d])
        if d in reduced:
            red_x.append(pair)
            j += keepdim
        else:
            kept_x.append(pair)
            kept_o.append((o_strides[j], x.shape[d]))
            j += 1
    ks, (kxs, kos) = coalesced([kept_x, kept_o])
    rs, (rxs,) = coalesced([red_x])
    kept = tuple(zip(ks, kxs, kos, strict=True))
    red_dims = tuple(zip(rs, rxs, strict=True))
    n_keep, n_red = math.prod(ks), math.prod(rs)
    elementwise_fold = red.pre is None and not red.var and red.op in (A.add, A.maximum, A.minimum, A.multiply)
    if (kept and red_dims and elementwise_fold and kept[-1][0] >= MIN_COLUMNS
            and kept[-1][1] < min(s for _, s in red_dims)):
        scheme = "columns"
    elif not red_dims or kept and math.ceil(n_keep / P) * n_red <= n_keep * (math.ceil(n_red / P) + 64):
        scheme = "rows"  # VectorE cycles of each layout, with a partition fold's overhead for spread
    else:
        scheme = "spread"
    # The partition walk (the last dim) may have any step: make it the longest dim, so that tiles
    # fill the partitions (rows: of the kept dims; columns: of the reduced dims).
    if scheme == "rows" and kept:
        kept = _longest_last(kept)
    if scheme == "columns":
        red_dims = _longest_last(red_dims)
    return Layout(kept, red_dims, scheme)


def _longest_last(dims):
    i = max(range(len(dims)), key=lambda k: dims[k][0])
    return dims[:i] + dims[i + 1:] + dims[i:i + 1]


# ---------------------------------------------------------------- groups of loads (kernel side)


@dataclass
class Group:
    """The loads folded into one column of results: ``chunks`` are (partitions, [p, f] HBM pattern)."""

    chunks: list
    width: int  # partitions of the result column
    across: bool  # the partitions hold one output element: fold them too


@dataclass
class Batch:
    """Groups whose results are stored by one DMA: ``n`` outputs ``out_step`` apart. Rows: group
    ``t`` holds outputs ``t*128 + c`` on its partitions ``c``; spread: group ``i`` holds output ``i``."""

    groups: list
    out_offset: int
    out_step: int
    n: int


def _free_chunks(red) -> list[tuple[int, tuple]]:
    """(offset, free pairs) covering the reduced dims, at most CHUNK elements and 3 dims each."""
    if not red:
        return [(0, ((1, 1),))]
    dims = list(red)
    inner, f = [], 1
    while dims and len(inner) < 3 and f * dims[-1][0] <= CHUNK:
        n, s = dims.pop()
        inner.insert(0, (s, n))
        f *= n
    pieces = [(0, tuple(inner))] if inner else []
    if not inner:  # the innermost reduced dim alone is longer than a chunk
        n, s = dims.pop()
        pieces = [(c0 * s, ((s, min(CHUNK, n - c0)),)) for c0 in range(0, n, CHUNK)]
    chunks = []
    for idx in itertools.product(*(range(n) for n, _ in dims)):
        base = sum(i * s for i, (_, s) in zip(idx, dims, strict=True))
        chunks += [(base + o, pairs) for o, pairs in pieces]
    return chunks


def kept_walk(kept):
    """(input offset, output offset) of every kept index but the innermost; that one's (n, steps)."""
    kept = kept or ((1, 0, 0),)
    *outer, inner = kept
    for idx in itertools.product(*(range(n) for n, _, _ in outer)):
        yield (sum(i * s for i, (_, s, _) in zip(idx, outer, strict=True)),
               sum(i * s for i, (_, _, s) in zip(idx, outer, strict=True)), inner)


def _batches(x, layout: Layout) -> list[Batch]:
    batches = []
    if layout.scheme == "rows":
        free = _free_chunks(layout.red)
        for xo, oo, (n, xs, os_) in kept_walk(layout.kept):
            groups = []
            for p0 in range(0, n, P):
                p = min(P, n - p0)
                base = x.offset + xo + p0 * xs
                groups.append(Group([(p, x.ap([[xs, p], *(list(q) for q in pairs)], offset=base + off))
                                     for off, pairs in free], p, False))
            batches.append(Batch(groups, oo, os_, n))
    else:  # spread: every kept index's reduced elements in [128, F] tiles
        pairs = [[s, n] for n, s in layout.red]
        for xo, oo, (n, xs, os_) in kept_walk(layout.kept):
            groups = []
            for i in range(n):
                v = x.ap(pairs, offset=x.offset + xo + i * xs)
                tiles = elementwise_tiles([v])
                groups.append(Group([(t.partitions, t.of(0, v)) for t in tiles],
                                    max(t.partitions for t in tiles), True))
            batches.append(Batch(groups, oo, os_, n))
    return batches


# ---------------------------------------------------------------- engine steps


def _col(p, n=1, buffer=None):
    return nl.ndarray((p, n), dtype=F32, buffer=buffer or nl.sbuf)


def _partial(dst, t, red: Reduction, pre, bias=None):
    """``dst [p, 1] = fold(op, pre(t + bias))`` along the free dim of tile ``t``."""
    if pre is None:
        nisa.tensor_reduce(dst=dst, op=red.op, data=t, axis=1)
        return
    scratch = nl.ndarray(t.shape, dtype=F32, buffer=nl.sbuf)  # the element results; only their sum is kept
    nisa.activation(dst=scratch, op=pre, data=t, bias=bias, reduce_op=A.add, reduce_res=dst,
                    reduce_cmd="reset_reduce")


def _fold_partitions(col, op, ones):
    """``[w, 1]`` fp32 partials -> ``[1, 1]``: a ones-matmul for sums, else transpose and reduce."""
    w = col.shape[0]
    res = _col(1, buffer=nl.psum)
    if op is A.add:
        nisa.nc_matmul(dst=res, stationary=col, moving=ones[:w])
        return res
    row = _col(1, w, buffer=nl.psum)
    nisa.nc_transpose(dst=row, data=col)
    res = _col(1)
    nisa.tensor_reduce(dst=res, op=op, data=row, axis=1)
    return res


def _finish(dst, value, divisor, sqrt: bool):
    """``dst`` (SBUF, the output's dtype) from the fp32 fold: divided, square-rooted, rounded once."""
    if divisor is None and not sqrt:
        nisa.tensor_copy(dst=dst, src=value)
        return
    if divisor is not None:
        quotient = dst if not sqrt else _col(*value.shape)
        nisa.tensor_scalar(dst=quotient, data=value, op0=A.divide, operand0=divisor)
        value = quotient
    if sqrt:
        nisa.activation(dst=dst, op=ActFunc.sqrt, data=value)


class _Consts:
    """Ones tiles, made once per kernel when a step needs them."""

    def __init__(self):
        self.made = {}

    def __call__(self, shape, dtype=F32):
        key = (shape, dtype)
        if key not in self.made:
            self.made[key] = nl.ones(shape, dtype=dtype, buffer=nl.sbuf)
        return self.made[key]


# ---------------------------------------------------------------- kernels


def reduction(*views, red: Reduction, layout: Layout):
    *outs, x = views
    consts = _Consts()
    if layout.scheme == "columns":
        _columns(outs[0], x, red, layout, consts)
        return
    batches = _batches(x, layout)
    loads = sum(len(g.chunks) for b in batches for g in b.groups)
    if loads > MAX_STEPS:
        raise Declined(f"{loads} loads")
    for b in batches:
        rows = layout.scheme == "rows"
        shape = (min(P, b.n), len(b.groups)) if rows else (1, b.n)
        results = [nl.ndarray(shape, dtype=o.dtype, buffer=nl.sbuf) for o in outs]
        for i in nl.affine_range(len(b.groups)):
            _reduce_group([r[:, i:i + 1] for r in results], x, b.groups[i], red, consts)
        for out, res in zip(outs, results, strict=True):
            if rows:
                store_columns(out, b.out_offset, b.out_step, res, b.n)
            else:
                nisa.dma_copy(dst=out.ap([[1, 1], [b.out_step, b.n]], offset=out.offset + b.out_offset),
                              src=res)


def _fold(g: Group, red: Reduction, load, op, pre, bias, consts):
    """One result column ``[width or 1, 1]`` (fp32) folded from the group's chunks."""
    w = g.width
    acc = _col(w, len(g.chunks))
    if any(p < w for p, _ in g.chunks):
        nisa.memset(acc, IDENTITY[op])  # partitions a short tile does not reach stay neutral
    for j, (p, _) in enumerate(g.chunks):
        _partial(acc[:p, j:j + 1], load(j), red, pre, None if bias is None else bias[:p])
    col = acc
    if len(g.chunks) > 1:
        col = _col(w)
        nisa.tensor_reduce(dst=col, op=op, data=acc, axis=1)
    if g.across:
        col = _fold_partitions(col, op, consts((P, 1)))
    return col


def _reduce_group(dsts, x, g: Group, red: Reduction, consts):
    """Fold group ``g`` into ``dsts`` (one ``[p, 1]`` slot per output)."""
    resident = red.var and sum(ap.size // p for p, ap in g.chunks) * x.dtype.itemsize <= RESIDENT_BYTES
    kept = {}

    def load(j):
        if j in kept:
            return kept[j]
        p, ap = g.chunks[j]
        t = nl.ndarray((p, ap.size // p), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=ap)
        if resident:
            kept[j] = t
        return t

    total = _fold(g, red, load, red.op, red.pre, None, consts)
    results = [(total, red.divisor)]
    if red.var:
        q = total.shape[0]
        neg_mean = _col(q)
        nisa.tensor_scalar(dst=neg_mean, data=total, op0=A.divide, operand0=-float(red.count))
        if g.across:  # the one mean, on every partition of the tiles: a K=1 ones-matmul broadcasts it
            wide = _col(g.width, buffer=nl.psum)
            nisa.nc_matmul(dst=wide, stationary=consts((1, g.width)), moving=neg_mean)
            neg_mean = _col(g.width)
            nisa.tensor_copy(dst=neg_mean, src=wide)
        squares = _fold(g, red, load, A.add, ActFunc.square, neg_mean, consts)
        results = [(squares, red.divisor)]
        if red.with_mean:
            results.append((total, float(red.count)))
    for k, (value, divisor) in enumerate(results):
        q = value.shape[0]
        _finish(dsts[k][:q], value, divisor, red.sqrt and not k)  # var_mean's mean: no square root


def _row_tiles(red):
    """(input offset, partitions, step) of the reduced elements' row tiles (columns layout)."""
    *outer, (n, s) = red
    for idx in itertools.product(*(range(m) for m, _ in outer)):
        base = sum(i * st for i, (_, st) in zip(idx, outer, strict=True))
        for p0 in range(0, n, P):
            yield base + p0 * s, min(P, n - p0), s


def _columns(out, x, red: Reduction, layout: Layout, consts):
    rows = list(_row_tiles(layout.red))
    blocks = [(xo, oo, f0, min(FREE_MAX, n - f0), xs, os_)
              for xo, oo, (n, xs, os_) in kept_walk(layout.kept) for f0 in range(0, n, FREE_MAX)]
    if len(rows) * len(blocks) > MAX_STEPS:
        raise Declined(f"{len(rows) * len(blocks)} loads")
    pw = rows[0][1]
    for b in nl.affine_range(len(blocks)):
        xo, oo, f0, f, xs, os_ = blocks[b]
        n_cols = -(-f // P)
        if red.op is A.add:
            acc = _col(min(P, f), n_cols, buffer=nl.psum)
        else:
            acc = _col(pw, f)
        for r, (ro, p, ps) in enumerate(rows):
            t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap([[ps, p], [xs, f]], offset=x.offset + xo + ro + f0 * xs))
            if red.op is A.add:
                column_sums(acc, t, consts((P, 1), t.dtype))  # PSUM accumulates across row tiles
            elif r == 0:
                nisa.tensor_copy(dst=acc[:p], src=t)
            else:
                nisa.tensor_tensor(dst=acc[:p], data1=acc[:p], data2=t, op=red.op)
        if red.op is not A.add:  # fold the partitions: column j*128 + c lands at [c, j], as the sums
            folded = _col(min(P, f), n_cols)
            for j in range(n_cols):
                c0, cs = j * P, min(P, f - j * P)
                tr = _col(cs, pw, buffer=nl.psum)
                nisa.nc_transpose(dst=tr, data=acc[:pw, c0:c0 + cs])
                nisa.tensor_reduce(dst=folded[:cs, j:j + 1], op=red.op, data=tr, axis=1)
            acc = folded
        tile = nl.ndarray(acc.shape, dtype=out.dtype, buffer=nl.sbuf)
        _finish(tile, acc, red.divisor, red.sqrt)
        store_columns(out, oo + f0 * os_, os_, tile, f)


def store_columns(out, offset, step, t, n):
    """Write column results (element ``j*128 + c`` at ``t[c, j]``) to ``n`` elements ``step`` apart."""
    full, tail = divmod(n, P)
    base = out.offset + offset
    if full:
        nisa.dma_copy(dst=out.ap([[step, P], [P * step, full]], offset=base), src=t[:, :full])
    if tail:
        nisa.dma_copy(dst=out.ap([[step, tail], [1, 1]], offset=base + full * P * step),
                      src=t[:tail, full:full + 1])


# ---------------------------------------------------------------- planners


def _dims(arg, ndim: int) -> list[int]:
    """ATen's reduced dims: None or [] means all of them."""
    if arg is None:
        return list(range(ndim))
    dims = [arg] if isinstance(arg, int) else list(arg)
    return dims or list(range(ndim))


def _launch(call: Call, dims, keepdim, red: Reduction) -> Launch | None:
    x = call.inputs[0]
    if x.dtype not in FLOAT_DTYPES or any(o.dtype not in FLOAT_DTYPES for o in call.outputs):
        return None
    if any(o.stride() != call.outputs[0].stride() for o in call.outputs):
        return None
    layout = plan_layout(x, call.outputs[0], dims, bool(keepdim), red)
    n = math.prod(s for s, _ in layout.red)
    divisor = max(n - red.correction, 0.0) if red.var else float(n) if red.mean else None  # ATen's divisors
    red = dataclasses.replace(red, divisor=divisor, count=n)
    operands = (*(OUT(i) for i in range(len(call.outputs))), IN(0))
    return Launch(reduction, operands, {"red": red, "layout": layout}, flops=float(x.numel()))


# sum.default and mean.default never reach the device's chokepoint: their CompositeExplicitAutograd
# kernels call the dim overloads.
@native("aten::sum.dim_IntList", "aten::mean.dim")
def plan_sum(call: Call) -> Launch | None:
    x = call.inputs[0]
    mean = call.op._schema.name == "aten::mean"
    if not mean and x.dtype not in FLOAT_DTYPES:
        return _integers(call, _dims(call.arg(1, "dim"), x.dim()), call.arg(2, "keepdim", False), A.add)
    return _launch(call, _dims(call.arg(1, "dim"), x.dim()), call.arg(2, "keepdim", False),
                   Reduction(A.add, mean=mean))


@native("aten::amax.default", "aten::amin.default", "aten::max.default", "aten::min.default",
        "aten::prod.dim_int", "aten::prod.default")
def plan_extreme(call: Call) -> Launch | None:
    x = call.inputs[0]
    base = call.op._schema.name.removeprefix("aten::")
    op = {"amax": A.maximum, "max": A.maximum, "amin": A.minimum, "min": A.minimum, "prod": A.multiply}[base]
    whole = call.op._overloadname == "default" and base != "amax" and base != "amin"
    dims = _dims(None if whole else call.arg(1, "dim", []), x.dim())
    keepdim = False if whole else call.arg(2, "keepdim", False)
    if x.dtype not in FLOAT_DTYPES:
        return None if base == "prod" else _integers(call, dims, keepdim, op)
    return _launch(call, dims, keepdim, Reduction(op))


def _integers(call: Call, dims, keepdim, op) -> Launch | None:
    """Integer and bool inputs fold exactly on GpSimd (``int_reduction.py``)."""
    from neuronsim.kernels.int_reduction import plan_int_reduction  # (it builds on this module)

    return plan_int_reduction(call, dims, bool(keepdim), op)


@native("aten::var.correction", "aten::std.correction", "aten::var_mean.correction")
def plan_var(call: Call) -> Launch | None:
    x = call.inputs[0]
    correction = call.arg(99, "correction")
    correction = 1.0 if correction is None else float(correction)
    name = call.op._schema.name
    red = Reduction(A.add, correction=correction, sqrt=name == "aten::std", var=True,
                    with_mean=name == "aten::var_mean")
    return _launch(call, _dims(call.arg(1, "dim"), x.dim()), call.arg(99, "keepdim", False), red)


_NORMS = {2.0: Reduction(A.add, pre=ActFunc.square, sqrt=True), 1.0: Reduction(A.add, pre=ActFunc.abs),
          math.inf: Reduction(A.abs_max), -math.inf: Reduction(A.abs_min)}


@native("aten::linalg_vector_norm.default")
def plan_vector_norm(call: Call) -> Launch | None:
    x = call.inputs[0]
    ord_ = call.arg(1, "ord", 2)
    red = _NORMS.get(float(ord_)) if isinstance(ord_, int | float) else None
    if red is None:
        return None
    return _launch(call, _dims(call.arg(2, "dim"), x.dim()), call.arg(3, "keepdim", False), red)
