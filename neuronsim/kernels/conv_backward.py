"""Convolution backward: ``convolution_backward`` (the input, weight and bias gradients of
``conv.py``'s convolutions) as one kernel, each part in the layout of ``conv.py``.

- Input gradient: a convolution maps output positions back onto input positions, so the input
  gradient of a convolution is the transposed convolution of ``grad_output`` with the same
  weights, and that of a transposed convolution is the plain convolution: ``conv.conv2d`` with the
  geometry turned around (channels on the partitions, phases instead of inserted zeros).
- Weight gradient: ``gw[p, q, kh, kw] = sum over images and positions a of A[p, a] * B[q, a * stride -
  pad + k * dil]`` contracts over positions, so here the positions go on the partitions: chunks of
  128 positions of ``A`` (``grad_output`` for a convolution, the input for a transposed one) and the
  tap's shifted window of ``B`` (the input, or ``grad_output``) are turned by TensorE transposes into
  ``[positions, channels]``, and ``nc_matmul(stationary=A_T, moving=B_T)`` accumulates ``[p, q]``
  per tap in PSUM over every chunk (several taps share a bank). The windows are access patterns into
  the channel-major tiles ``conv.py`` loads (zero-padded), so no im2col either.
- Bias gradient: ``grad_output`` summed over images and positions, channels on the partitions: a
  VectorE ``tensor_reduce`` along the free axis per block, added up in fp32.

Covered: what ``conv.py`` covers, any ``output_mask``.
"""

from __future__ import annotations

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.conv import (
    Engines,
    Geometry,
    Phase,
    as_2d,
    balanced,
    blocks,
    conv2d,
    dtypes_ok,
    flops_of,
    geometry_of,
    grid_chunks,
    input_cols,
    load_padded,
    phases,
    t_range,
    transposed_of,
    window,
)
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.sim.ir import AluOp

A = AluOp
F32 = nl.float32
ACC_BANKS = 4  # PSUM banks the weight gradient's accumulators take (the rest: transposes)
MAX_STEPS = 65536  # TensorE instructions of the weight gradient; more: the op runs on the host
REDUCE_FREE = 8192  # elements per partition the bias gradient reduces per instruction


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


# ---------------------------------------------------------------- weight gradient


def _grid_geometry(g: Geometry) -> tuple[Geometry, bool]:
    """The geometry whose output grid is A's positions and whose taps read B (conv.phases' form),
    and whether A is the op's input (a transposed convolution) rather than grad_output."""
    if not g.transposed:
        return g, False
    # gw[ci, co, k] = sum x[ci, a] * gy[co, a * s - p + k * d]: a plain convolution from gy's
    # positions onto x's grid.
    return transposed_of(g, False), True


def weight_grad(gw, a, b, g: Geometry):
    """``gw`` [P, Qg, KH, KW] from ``a`` [N, P, GH, GW] (on the grid) and ``b`` [N, Q, BH, BW] (read
    through the taps), for ``g`` a plain convolution from b onto a's grid (groups split P and Q)."""
    P = nl.tile_size.pmax
    bank = nl.tile_size.psum_bank_fmax_bytes
    (p_all, q_all) = (g.cout, g.cin)
    pg, qg = p_all // g.groups, q_all // g.groups
    ps = phases(g)
    (phase,) = ps
    cols = input_cols(ps)
    n_cols = cols[1] - cols[0] + 1
    isz = max(a.dtype.itemsize, b.dtype.itemsize)
    blks = blocks(g, ps, n_cols * isz, g.ow * isz)
    p_chunks, q_chunks = _chunks(pg, P), _chunks(qg, P)
    per_bank = {qs: max(1, bank // (qs * 4)) for _, qs in q_chunks}
    tap_groups = {qs: _chunks(g.taps, per_bank[qs] * ACC_BANKS) for _, qs in q_chunks}
    positions = sum(len(grid_chunks(b_.nb, b_.o1 - b_.o0, g.ow, P)) for b_ in blks)
    steps = g.groups * len(p_chunks) * sum(len(tap_groups[qs]) * (1 + 2 * g.taps) for _, qs in q_chunks)
    if steps * positions > MAX_STEPS:
        raise Declined(f"more than {MAX_STEPS} TensorE steps")
    engines = Engines()
    for grp in range(g.groups):
        for p0, psz in p_chunks:
            for q0, qs in q_chunks:
                for k0, kn in tap_groups[qs]:
                    _weight_grad_part(gw, a, b, g, phase, blks, cols, grp, (p0, psz), (q0, qs), (k0, kn),
                                      per_bank[qs], engines)


def _weight_grad_part(gw, a, b, g, phase: Phase, blks, cols, grp, pc, qc, kc, per_bank, engines):
    """gw[p chunk, q chunk, taps k0 .. k0+kn] accumulated over every block of positions."""
    P = nl.tile_size.pmax
    (p0, psz), (q0, qs), (k0, kn) = pc, qc, kc
    pa, qb = grp * (g.cout // g.groups) + p0, grp * (g.cin // g.groups) + q0
    accs = [nl.ndarray((psz, tn, qs), dtype=F32, buffer=nl.psum) for _, tn in _chunks(kn, per_bank)]
    taps = phase.taps[k0:k0 + kn]
    for bi in nl.affine_range(len(blks)):
        blk = blks[bi]
        at = nl.ndarray((psz, blk.nb, blk.o1 - blk.o0, g.ow), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a[blk.n0:blk.n0 + blk.nb, pa:pa + psz, blk.o0:blk.o1].permute((1, 0, 2, 3)))
        bt = load_padded(b, blk.n0, blk.nb, qb, qs, blk.rows, cols, g.h, g.w)
        ta, tb = t_range(phase, blk.o0, blk.o1)
        for j0, m, t0, q, u0, cw in grid_chunks(blk.nb, tb - ta, g.ow, P):
            n_pos = m * q * cw
            a_t = _transposed(window(at, j0, m, t0, 1, q, u0, 1, cw), n_pos, psz, a.dtype, engines)
            b_t = nl.ndarray((n_pos, kn, qs), dtype=b.dtype, buffer=nl.sbuf)
            per_copy = max(1, nl.tile_size.psum_bank_fmax_bytes // (qs * b.dtype.itemsize))
            for c0, cn in _chunks(kn, per_copy):
                pst = nl.ndarray((n_pos, cn, qs), dtype=b.dtype, buffer=nl.psum)
                for j in range(cn):
                    _, ih0, iw0 = taps[c0 + j]
                    r = ih0 + phase.ihs * (ta + t0) - blk.rows[0]
                    c = iw0 + phase.iws * u0 - cols[0]
                    shifted = window(bt, j0, m, r, phase.ihs, q, c, phase.iws, cw)
                    nisa.nc_transpose(dst=pst[:, j, :], data=shifted)
                nisa.tensor_copy(dst=b_t[:, c0:c0 + cn, :], src=pst, engine=engines.next())
            for j in range(kn):
                acc = accs[j // per_bank]
                nisa.nc_matmul(dst=acc[:, j % per_bank, :], stationary=a_t, moving=b_t[:, j, :])
    res = nl.ndarray((psz, qs, kn), dtype=gw.dtype, buffer=nl.sbuf)
    for i, (t0, tn) in enumerate(_chunks(kn, per_bank)):
        # [p, tap, q] in PSUM -> [p, q, tap] in SBUF: gw's order, so the store is contiguous per p.
        nisa.tensor_copy(dst=res[:, :, t0:t0 + tn].permute((0, 2, 1)), src=accs[i], engine=engines.next())
    dst = gw.ap(
        [[gw.dims[0][0], psz], [gw.dims[1][0], qs], [gw.dims[3][0], kn]],
        offset=gw.offset + pa * gw.dims[0][0] + q0 * gw.dims[1][0] + k0 * gw.dims[3][0])
    nisa.dma_copy(dst=dst, src=res)


def _transposed(src, n_pos, parts, dtype, engines):
    """``src`` [parts, positions...] as an SBUF tile [positions, parts] (a TensorE transpose)."""
    ps = nl.ndarray((n_pos, parts), dtype=dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=src)
    t = nl.ndarray((n_pos, parts), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=ps, engine=engines.next())
    return t


# ---------------------------------------------------------------- bias gradient


def bias_grad(gb, gy):
    """``gb[c] = sum over n, h, w of gy[n, c, h, w]``: channels on the partitions, fp32 sums."""
    P = nl.tile_size.pmax
    n, c, h, w = gy.shape
    per_image = h * w
    if per_image <= REDUCE_FREE:
        per = balanced(n, max(1, REDUCE_FREE // per_image))
        pieces = [(n0, nb, 0, h) for n0, nb in _chunks(n, per)]
    else:
        rows = balanced(h, max(1, REDUCE_FREE // w))
        pieces = [(n0, 1, r0, rn) for n0 in range(n) for r0, rn in _chunks(h, rows)]
    step = gb.dims[0][0]
    for c0, cs in _chunks(c, P):
        total = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
        nisa.memset(total, 0.0)
        for i in nl.affine_range(len(pieces)):
            n0, nb, r0, rn = pieces[i]
            t = nl.ndarray((cs, nb, rn, w), dtype=gy.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=gy[n0:n0 + nb, c0:c0 + cs, r0:r0 + rn].permute((1, 0, 2, 3)))
            part = nl.ndarray((cs, 1), dtype=F32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=part, op=A.add, data=t.reshape((cs, nb * rn * w)), axis=1)
            nisa.tensor_tensor(dst=total, data1=total, data2=part, op=A.add)
        res = nl.ndarray((cs, 1), dtype=gb.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=total)
        nisa.dma_copy(dst=gb.ap([[step, cs], [1, 1]], offset=gb.offset + c0 * step), src=res)


# ---------------------------------------------------------------- the op


def convolution_backward(*views, geometry: Geometry, want: dict):
    views = list(views)
    outs = {k: as_2d(views.pop(0)) if k != "db" else views.pop(0) for k in ("dx", "dw", "db") if want[k]}
    gy, x, w = (as_2d(v) for v in views)
    g = geometry
    if want["dx"]:
        conv2d(outs["dx"], gy, w, None, transposed_of(g, not g.transposed))
    if want["dw"]:
        grid, a_is_input = _grid_geometry(g)
        weight_grad(outs["dw"], x if a_is_input else gy, gy if a_is_input else x, grid)
    if want["db"]:
        bias_grad(outs["db"], gy)


@native("aten::convolution_backward.default")
def plan_convolution_backward(call: Call) -> Launch | None:
    names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups", "output_mask")
    gy, x, w, _, stride, padding, dilation, transposed, _, groups, mask = (
        call.arg(i, n) for i, n in enumerate(names))
    want = dict(zip(("dx", "dw", "db"), map(bool, mask), strict=True))
    if len(call.outputs) != sum(want.values()) or not any(want.values()) or len(call.inputs) != 3:
        return None
    if not dtypes_ok(gy, x, w, *call.outputs):
        return None
    g = geometry_of(x, w, gy, stride, padding, dilation, transposed, groups)
    if g is None:
        return None
    flops = flops_of(g) * (want["dx"] + want["dw"])
    return Launch(convolution_backward, (*(OUT(i) for i in range(len(call.outputs))), IN(0), IN(1), IN(2)),
                  {"geometry": g, "want": want}, flops=flops,
                  result=None if all(want.values()) else lambda outs: _masked(outs, want))


def _masked(outs, want) -> tuple:
    it = iter(outs)
    return tuple(next(it) if want[k] else None for k in ("dx", "dw", "db"))
