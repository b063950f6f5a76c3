"""Convolution: ``convolution`` (conv1d / conv2d, plain or transposed, grouped, strided, padded,
dilated) as TensorE matmuls, the way a Trainium compiler lays a convolution out: im2col-free.

Layout. Channels go on the partitions and positions along the free axis, for the input, the
output and the PSUM accumulators alike:

- an input block is one SBUF tile ``[C_in chunk (partitions), images, rows, cols]``, zero-padded
  around the image (GpSimd memset, then one DMA of the real rows: each partition reads rows of W
  contiguous elements, NCHW's natural order);
- each kernel tap ``(kh, kw)`` is one ``nc_matmul``: the stationary operand is the tap's weights
  ``[C_in chunk, C_out chunk]`` (contraction over C_in on the PE rows), the moving operand is the
  input block seen through a shifted, strided window ``[C_in chunk, images, rows, cols]`` (an
  access pattern into the same tile: nothing is copied or replicated), and one PSUM bank
  accumulates every tap and every C_in chunk of an output chunk of at most 512 positions;
- the finished bank holds ``[C_out chunk, positions]``, which is the output's HBM layout per
  channel, so it is evacuated (the bias is a per-partition scalar: ScalarE ``activation`` bias or
  VectorE ``tensor_scalar``, the two engines in turn) into an output tile that one DMA stores.

Why this layout: with positions on the partitions (im2col) the input would be replicated KH*KW
times through HBM or DMA, and the output would leave TensorE transposed relative to NCHW; with
channels on the partitions every tap is a window onto the one loaded tile, bias and per-channel
work are per-partition scalars, and stores are long contiguous rows. What it costs: TensorE's
contraction uses only C_in rows of the PE array (a 3-channel image uses 3 of 128; the time of a
matmul depends on its moving size, not on K, so small-C_in layers are PE-inefficient, as on the
hardware without tap stacking).

Weights ``[C_out, C_in / groups, KH, KW]`` are loaded as contiguous rows ``[C_out, C_in*KH*KW]``
and transposed by TensorE, tap by tap, into ``[C_in, tap, C_out]`` once per kernel (kept in SBUF
across blocks when they fit).

Transposed convolution (``ConvTranspose2d``, and the input gradient of a convolution) is not done
by inserting zeros: output position ``oh = ih * stride - pad + kh * dil`` splits the output into
``stride_h * stride_w`` phases (``oh mod stride``); within a phase only the taps with
``(phase + pad - kh * dil) mod stride = 0`` contribute, each a stride-1 window onto the input, so
each phase is a small convolution written into a strided sub-grid of the output tile. No multiply
by an inserted zero is issued. Its weights ``[C_in, C_out / groups, KH, KW]`` already have the
contraction dim first: they load as they are, and a tap's stationary operand is a strided view.

Images are processed in blocks that fit SBUF (``IN_BYTES``, ``OUT_BYTES`` per partition), rows of
one image when an image does not; blocks are an ``affine_range``, so the next block's loads
overlap this one's matmuls. Covered: float32 / bfloat16 / float16 (input, weight, bias and output
of one dtype), 1-d and 2-d, any stride, padding, dilation, output padding and groups. 3-d
convolutions run on the host. The backward (``convolution_backward``) is ``conv_backward.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
IN_BYTES = 48 * 1024  # per partition: the input tiles of one block (every C_in chunk of a group)
OUT_BYTES = 32 * 1024  # per partition: one C_out chunk's output tile of a block
WEIGHT_BYTES = 48 * 1024  # per partition: weights this small stay in SBUF for the whole kernel
MAX_MATMULS = 65536  # larger convolutions run on the host (the trace would take minutes)


# ---------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Geometry:
    """A 2-d convolution (1-d: height 1). ``transposed``: x has C_in channels, out C_out, and
    ``oh = ih * stride - pad + kh * dil``; else ``ih = oh * stride - pad + kh * dil``."""

    n: int
    cin: int
    h: int
    w: int
    cout: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    transposed: bool

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups


@dataclass(frozen=True)
class Phase:
    """A sub-grid of the output: rows ``oh0 + ohs * t`` (t < nh), cols ``ow0 + ows * u`` (u < nw);
    tap ``(k, ih0, iw0)`` reads input row ``ih0 + ihs * t`` and col ``iw0 + iws * u``."""

    oh0: int
    ohs: int
    nh: int
    ow0: int
    ows: int
    nw: int
    ihs: int
    iws: int
    taps: tuple[tuple[int, int, int], ...]


def phases(g: Geometry) -> list[Phase]:
    (sh, sw), (ph, pw), (dh, dw) = g.stride, g.padding, g.dilation
    if not g.transposed:
        taps = tuple((kh * g.kw + kw, kh * dh - ph, kw * dw - pw) for kh in range(g.kh) for kw in range(g.kw))
        return [Phase(0, 1, g.oh, 0, 1, g.ow, sh, sw, taps)]
    out = []
    for rh in range(min(sh, g.oh)):
        for rw in range(min(sw, g.ow)):
            taps = tuple((kh * g.kw + kw, (rh + ph - kh * dh) // sh, (rw + pw - kw * dw) // sw)
                         for kh in range(g.kh) if (rh + ph - kh * dh) % sh == 0
                         for kw in range(g.kw) if (rw + pw - kw * dw) % sw == 0)
            out.append(Phase(rh, sh, len(range(rh, g.oh, sh)), rw, sw, len(range(rw, g.ow, sw)), 1, 1, taps))
    return out


def _span(start: int, step: int, count: int) -> tuple[int, int]:
    return start, start + step * (count - 1)


def t_range(p: Phase, o0: int, o1: int) -> tuple[int, int]:
    """The phase's row indices t whose output row lies in ``[o0, o1)``."""
    lo = max(0, -(-(o0 - p.oh0) // p.ohs))
    hi = min(p.nh, -(-(o1 - p.oh0) // p.ohs))
    return lo, max(lo, hi)


def input_rows(ps: list[Phase], o0: int, o1: int) -> tuple[int, int] | None:
    """First and last input row (possibly outside the image) the output rows ``[o0, o1)`` read."""
    lo, hi = None, None
    for p in ps:
        ta, tb = t_range(p, o0, o1)
        if ta == tb:
            continue
        for _, ih0, _ in p.taps:
            a, b = _span(ih0 + p.ihs * ta, p.ihs, tb - ta)
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return None if lo is None else (lo, hi)


def input_cols(ps: list[Phase]) -> tuple[int, int]:
    spans = [_span(iw0, p.iws, p.nw) for p in ps for _, _, iw0 in p.taps]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def balanced(n: int, most: int) -> int:
    """The size of ``ceil(n / most)`` nearly equal parts of ``n``."""
    return -(-n // -(-n // most)) if n else 0


def grid_chunks(nb: int, rows: int, cols: int, limit: int) -> list[tuple[int, int, int, int, int, int]]:
    """``(j0, m, t0, q, u0, cw)`` pieces of an ``[nb, rows, cols]`` grid of at most ``limit`` positions:
    whole images side by side, else rows of one image, else pieces of one row."""
    if cols > limit:
        cw = balanced(cols, limit)
        return [(j, 1, t, 1, u0, n) for j in range(nb) for t in range(rows) for u0, n in _chunks(cols, cw)]
    if rows * cols > limit:
        q = balanced(rows, limit // cols)
        return [(j, 1, t0, n, 0, cols) for j in range(nb) for t0, n in _chunks(rows, q)]
    m = balanced(nb, limit // (rows * cols))
    return [(j0, n, 0, rows, 0, cols) for j0, n in _chunks(nb, m)]


@dataclass(frozen=True)
class Block:
    n0: int
    nb: int
    o0: int  # output rows [o0, o1)
    o1: int
    rows: tuple[int, int]  # input rows [lo, hi] the block reads (may reach outside the image)


def blocks(g: Geometry, ps: list[Phase], in_bytes_per_row, out_bytes_per_row, step: int = 1) -> list[Block]:
    """Blocks of whole images (as many as fit the budgets), else of output rows of one image
    (a multiple of ``step`` rows: a transposed convolution's blocks start on a phase boundary)."""

    def fits(nb, o0, o1):
        rows = input_rows(ps, o0, o1)
        n_in = 0 if rows is None else rows[1] - rows[0] + 1
        return nb * n_in * in_bytes_per_row <= IN_BYTES and nb * (o1 - o0) * out_bytes_per_row <= OUT_BYTES

    def block(n0, nb, o0, o1):
        return Block(n0, nb, o0, o1, input_rows(ps, o0, o1) or (0, -1))

    if fits(1, 0, g.oh):
        per = 1
        while per < g.n and fits(per + 1, 0, g.oh):
            per += 1
        per = balanced(g.n, per)
        return [block(n0, nb, 0, g.oh) for n0, nb in _chunks(g.n, per)]
    rows = 0
    while rows + step <= g.oh and fits(1, 0, rows + step):
        rows += step
    if rows == 0:
        raise Declined(f"one output row of {g} does not fit SBUF")
    rows = balanced(g.oh, rows)
    rows = -(-rows // step) * step
    return [block(n0, 1, o0, min(g.oh, o0 + rows)) for n0 in range(g.n) for o0 in range(0, g.oh, rows)]


# ---------------------------------------------------------------- tiles


class Engines:
    """VectorE and ScalarE in turn, for PSUM evacuations."""

    def __init__(self):
        self.n = 0

    def next(self):
        self.n += 1
        return nisa.engine.scalar if self.n % 2 else nisa.engine.vector


def load_padded(x, n0, nb, c0, cs, rows, cols, h, w, dtype=None):
    """SBUF tile ``[cs, nb, rows, cols]`` of ``x`` [N, C, H, W] (an HBM view): input rows
    ``rows = (lo, hi)`` and cols ``cols = (lo, hi)``, zeros where they fall outside the image."""
    (r0, r1), (q0, q1) = rows, cols
    t = nl.ndarray((cs, nb, r1 - r0 + 1, q1 - q0 + 1), dtype=dtype or x.dtype, buffer=nl.sbuf)
    a, b = max(r0, 0), min(r1, h - 1)
    c, d = max(q0, 0), min(q1, w - 1)
    if (a, b, c, d) != (r0, r1, q0, q1):
        nisa.memset(t, 0.0, engine=nisa.engine.gpsimd)
    if a <= b and c <= d:
        src = x[n0:n0 + nb, c0:c0 + cs, a:b + 1, c:d + 1].permute((1, 0, 2, 3))
        nisa.dma_copy(dst=t[:, :, a - r0:b - r0 + 1, c - q0:d - q0 + 1], src=src)
    return t


def window(t, j0, m, r, rs, q, c, cs, cw):
    """``t[:, j0:j0+m, r::rs (q rows), c::cs (cw cols)]``."""
    return t[:, j0:j0 + m, r:r + rs * (q - 1) + 1:rs, c:c + cs * (cw - 1) + 1:cs]


def conv_weights(w, g: Geometry, grp, ci0, cis, co0, cos):
    """The stationary operands of one (group, C_in chunk, C_out chunk): a function ``tap -> [cis, cos]``."""
    if g.transposed:  # w [C_in, C_out / groups, KH, KW]: C_in first already
        t = nl.ndarray((cis, cos, g.kh, g.kw), dtype=w.dtype, buffer=nl.sbuf)
        ci = grp * g.cin_g + ci0
        nisa.dma_copy(dst=t, src=w[ci:ci + cis, co0:co0 + cos])
        return lambda k: t[:, :, k // g.kw, k % g.kw]
    # w [C_out, C_in / groups, KH, KW]: load C_out rows, transpose each tap on TensorE.
    co = grp * g.cout_g + co0
    rows = nl.ndarray((cos, cis, g.kh, g.kw), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=w[co:co + cos, ci0:ci0 + cis])
    wt = nl.ndarray((cis, g.taps, cos), dtype=w.dtype, buffer=nl.sbuf)
    per_bank = max(1, nl.tile_size.psum_bank_fmax_bytes // (cos * w.dtype.itemsize))
    for k0, kn in _chunks(g.taps, per_bank):
        ps = nl.ndarray((cis, kn, cos), dtype=w.dtype, buffer=nl.psum)
        for j in range(kn):
            k = k0 + j
            nisa.nc_transpose(dst=ps[:, j, :], data=rows[:, :, k // g.kw, k % g.kw])
        nisa.tensor_copy(dst=wt[:, k0:k0 + kn, :], src=ps)
    return lambda k: wt[:, k, :]


def _column(view, c0, cs, dtype=F32):
    """``view[c0:c0+cs]`` of a 1-d HBM view as an SBUF column ``[cs, 1]``."""
    t = nl.ndarray((cs, 1), dtype=dtype, buffer=nl.sbuf)
    step = view.dims[0][0]
    nisa.dma_copy(dst=t, src=view.ap([[step, cs], [1, 1]], offset=view.offset + c0 * step))
    return t


# ---------------------------------------------------------------- the kernel


def conv2d(out, x, w, bias, g: Geometry):
    """``out`` [N, C_out, OH, OW] = the convolution ``g`` of ``x`` [N, C_in, H, W] with ``w`` (+ bias)."""
    P = nl.tile_size.pmax
    LIMIT = nl.tile_size.gemm_moving_fmax  # positions per PSUM bank of fp32
    ps = phases(g)
    ci_chunks, co_chunks = _chunks(g.cin_g, P), _chunks(g.cout_g, P)
    cols = input_cols(ps)
    n_cols = cols[1] - cols[0] + 1
    isz, osz = x.dtype.itemsize, out.dtype.itemsize
    step = g.stride[0] if g.transposed else 1
    blks = blocks(g, ps, len(ci_chunks) * n_cols * isz, g.ow * osz, step)
    chunks = sum(len(grid_chunks(b.nb, t_range(p, b.o0, b.o1)[1] - t_range(p, b.o0, b.o1)[0], p.nw, LIMIT))
                 * len(p.taps) for b in blks for p in ps)
    if chunks * g.groups * len(co_chunks) * len(ci_chunks) > MAX_MATMULS:
        raise Declined(f"more than {MAX_MATMULS} matmuls")
    w_bytes = g.groups * len(ci_chunks) * g.taps * g.cout_g * w.dtype.itemsize
    resident = w_bytes <= WEIGHT_BYTES
    weights, biases = {}, {}

    def stationary(grp, i, j):
        key = (grp, i, j)
        if key not in weights or not resident:
            (ci0, cis), (co0, cos) = ci_chunks[i], co_chunks[j]
            weights[key] = conv_weights(w, g, grp, ci0, cis, co0, cos)
        return weights[key]

    if bias is not None:
        for grp in range(g.groups):
            for j, (co0, cos) in enumerate(co_chunks):
                biases[(grp, j)] = _column(bias, grp * g.cout_g + co0, cos)
    if resident:
        for grp in range(g.groups):
            for i in range(len(ci_chunks)):
                for j in range(len(co_chunks)):
                    stationary(grp, i, j)
    engines = Engines()
    for b in nl.affine_range(len(blks)):
        blk = blks[b]
        for grp in range(g.groups):
            xs = [load_padded(x, blk.n0, blk.nb, grp * g.cin_g + ci0, cis, blk.rows, cols, g.h, g.w)
                  for ci0, cis in ci_chunks]
            for j, (co0, cos) in enumerate(co_chunks):
                ws = [stationary(grp, i, j) for i in range(len(ci_chunks))]
                ot = nl.ndarray((cos, blk.nb, blk.o1 - blk.o0, g.ow), dtype=out.dtype, buffer=nl.sbuf)
                bias_t = biases.get((grp, j))
                for p in ps:
                    _phase(ot, xs, ws, bias_t, p, blk, cols, cos, LIMIT, engines)
                co = grp * g.cout_g + co0
                dst = out[blk.n0:blk.n0 + blk.nb, co:co + cos, blk.o0:blk.o1]
                nisa.dma_copy(dst=dst.permute((1, 0, 2, 3)), src=ot)


def _phase(ot, xs, ws, bias_t, p: Phase, blk: Block, cols, cos, limit, engines):
    """One phase of one block into the output tile ``ot`` [cos, nb, block rows, OW]."""
    ta, tb = t_range(p, blk.o0, blk.o1)
    if ta == tb or p.nw == 0:
        return
    r_out = p.oh0 + p.ohs * ta - blk.o0
    for j0, m, t0, q, u0, cw in grid_chunks(blk.nb, tb - ta, p.nw, limit):
        dst = window(ot, j0, m, r_out + p.ohs * t0, p.ohs, q, p.ow0 + p.ows * u0, p.ows, cw)
        if not p.taps:  # no tap reaches this phase (stride > kernel extent): bias or zeros
            nisa.memset(dst, 0.0)
            if bias_t is not None:
                nisa.tensor_scalar(dst=dst, data=dst, op0=A.add, operand0=bias_t)
            continue
        acc = nl.ndarray((cos, m, q, cw), dtype=F32, buffer=nl.psum)
        for xt, w_of in zip(xs, ws, strict=True):
            for k, ih0, iw0 in p.taps:
                r = ih0 + p.ihs * (ta + t0) - blk.rows[0]
                c = iw0 + p.iws * u0 - cols[0]
                moving = window(xt, j0, m, r, p.ihs, q, c, p.iws, cw)
                nisa.nc_matmul(dst=acc, stationary=w_of(k), moving=moving)
        evacuate(dst, acc, bias_t, engines)


def evacuate(dst, acc, bias_t, engines):
    """``dst = acc (+ bias per partition)`` on ScalarE or VectorE, in turn."""
    eng = engines.next()
    if bias_t is None:
        nisa.tensor_copy(dst=dst, src=acc, engine=eng)
    elif eng is nisa.engine.scalar:
        nisa.activation(dst=dst, op=ActFunc.identity, data=acc, bias=bias_t)
    else:
        nisa.tensor_scalar(dst=dst, data=acc, op0=A.add, operand0=bias_t)


# ---------------------------------------------------------------- the op


def as_2d(view):
    """A 1-d convolution's ``[N, C, L]`` view (or ``[C_out, C_in, K]`` weight) as ``[N, C, 1, L]``."""
    return view if len(view.shape) == 4 else view.expand_dim(2)


def convolution(out, x, w, *bias, geometry: Geometry):
    conv2d(as_2d(out), as_2d(x), as_2d(w), bias[0] if bias else None, geometry)


def pairs(values, dims: int, height: int) -> tuple[int, int] | None:
    """(height, width) values of a 1-d (``height`` for the missing dim) or 2-d argument."""
    values = [int(v) for v in values]
    if len(values) == 1:
        values = values * dims
    if len(values) != dims:
        return None
    return (height, values[0]) if dims == 1 else (values[0], values[1])


def geometry_of(x, w, out, stride, padding, dilation, transposed, groups) -> Geometry | None:
    """The 2-d geometry of a 1-d or 2-d convolution call (None: not covered)."""
    dims = x.dim() - 2
    if dims not in (1, 2) or w.dim() != x.dim() or out.dim() != x.dim():
        return None
    s, p, d = pairs(stride, dims, 1), pairs(padding, dims, 0), pairs(dilation, dims, 1)
    if s is None or p is None or d is None or min(*s, *d) < 1 or min(p) < 0 or groups < 1:
        return None
    n, cin, *spatial = x.shape
    _, cout, *ospatial = out.shape
    h, wd = (1, spatial[0]) if dims == 1 else spatial
    oh, ow = (1, ospatial[0]) if dims == 1 else ospatial
    kh, kw = (1, w.shape[2]) if dims == 1 else (w.shape[2], w.shape[3])
    if cin % groups or cout % groups:
        return None
    return Geometry(n, cin, h, wd, cout, oh, ow, kh, kw, s, p, d, groups, bool(transposed))


def dtypes_ok(*ts) -> bool:
    present = [t for t in ts if t is not None]
    return all(t.dtype in FLOAT_DTYPES for t in present) and len({t.dtype for t in present}) == 1


@native("aten::convolution.default")
def plan_convolution(call: Call) -> Launch | None:
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding",
             "groups")
    x, w, bias, stride, padding, dilation, transposed, _, groups = (
        call.arg(i, n) for i, n in enumerate(names))
    out = call.outputs[0]
    if not dtypes_ok(x, w, bias, out) or (bias is not None and bias.dim() != 1):
        return None
    g = geometry_of(x, w, out, stride, padding, dilation, transposed, groups)
    if g is None:
        return None
    operands = (OUT(0), IN(0), IN(1), *((IN(2),) if bias is not None else ()))
    return Launch(convolution, operands, {"geometry": g}, flops=flops_of(g))


def transposed_of(g: Geometry, transposed: bool) -> Geometry:
    """The geometry that maps ``g``'s output back onto its input (the input gradient's)."""
    return Geometry(g.n, g.cout, g.oh, g.ow, g.cin, g.h, g.w, g.kh, g.kw, g.stride, g.padding, g.dilation,
                    g.groups, transposed)


def flops_of(g: Geometry) -> float:
    return 2.0 * g.n * (g.h * g.w if g.transposed else g.oh * g.ow) * g.cout_g * g.cin * g.taps

