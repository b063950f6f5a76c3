"""Scaled dot-product attention as one fused NKI kernel per direction (flash-attention style).

``F.scaled_dot_product_attention`` on the device asks ``_fused_sdp_choice`` which backend to take
(``device/op_table.py``: ATen's own choice is a C++ stub a Python backend cannot register). The
answer here is OVERRIDEABLE for the calls these kernels cover, which then run
``_scaled_dot_product_fused_attention_overrideable`` and, through its autograd formula, the
``_backward`` op; everything else keeps ATen's math decomposition.

Forward, per (batch, head, 128-query tile), keys streamed in tiles of 512 (one PSUM bank):

- ``S = Q K^T`` on TensorE into PSUM (``Q^T`` and the head's ``K^T`` loaded transposed by DMA; K^T
  and V stay in SBUF for all the query tiles and the GQA heads sharing them);
- the mask: a float bias added on VectorE while PSUM is evacuated with the scale, ``is_causal`` by a
  GpSimd ``affine_select`` on the diagonal tiles only (tiles above the diagonal are skipped);
- online softmax: the row max on VectorE, ``exp(x - max)`` with its row sum in one ScalarE
  ``activation`` (the running max is the bias), the running sum and the output rescaled by
  ``exp(old max - new max)``;
- ``P @ V`` on TensorE: P is transposed in 128x128 blocks by TensorE (the contraction must be on
  the partitions), the blocks accumulate in one PSUM tile.

The scores never leave SBUF/PSUM. The output is divided by the row sum once at the end; the
log-sum-exp (natural log, of the scaled and masked scores) is written for the backward.

Backward, per (batch, KV head, 128-key tile), over the query tiles of every head of the group:
``P = exp(S - lse)`` is recomputed, ``dV += P^T dO`` and ``dK += dS^T Q`` accumulate in PSUM
(queries on the partitions: no transpose), ``dP = dO V^T``, ``dS = P * (dP - D)`` with
``D = rowsum(dO * O)`` (VectorE), and ``dQ += dS K`` (dS transposed on TensorE) accumulates in SBUF
across the key tiles. Matmul operands are the inputs' dtype (bf16 P and dS for bf16 inputs, as
flash kernels do); PSUM and statistics are fp32; results round once.

A fully masked row gives 0 (as ATen's math path) and zero gradients. Covered: float32 and
bfloat16, 3-D or 4-D q/k/v of any strides, head dims <= 128, GQA (``enable_gqa``), a float or
boolean mask broadcastable to (B, H, L, S) that needs no gradient, ``is_causal``, a positive
``scale``, ``dropout_p == 0``, sequences whose resident K/V (forward) and Q/dO (backward) fit SBUF.
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.matmul import load_kxm
from neuronsim.kernels.norm import _position
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
DTYPES = (torch.float32, torch.bfloat16)
Q_TILE = nl.tile_size.pmax  # queries per tile: the partitions
K_TILE = nl.tile_size.psum_bank_fmax  # keys per forward score tile: one PSUM bank of fp32
BLOCK = nl.tile_size.pmax  # keys per transpose / P@V contraction (the PE array's rows); backward key tile
HEAD_DIM_MAX = nl.tile_size.pmax  # a head dim is a contraction (partitions) or a transposed block
RESIDENT_BYTES = 96 * 1024  # per partition: a head's K^T and V (forward), a group's Q, dO (backward)
NEG_BIG = -3.0e38  # floor of the running max: exp(-inf - floor) = 0, never inf - inf
TINY = 1.0e-30  # floor of the row sum: a fully masked row gives 0 * (1 / TINY) = 0

OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE)
MATH = int(SDPBackend.MATH)


# ---------------------------------------------------------------- views


def _shape4(view) -> tuple[int, int, int, int]:
    return (1,) * (4 - len(view.shape)) + tuple(view.shape)


def _steps4(view) -> tuple[int, int, int, int]:
    """Element steps of a [B, H, rows, cols] view (3-D, 2-D: leading dims of 1); 0 where broadcast."""
    dims = [(0, 1)] * (4 - len(view.dims)) + list(view.dims)
    return tuple(s if n > 1 else 0 for s, n in dims)


def _block(view, steps, b, h, r0, nr, c0, nc):
    """Rows ``r0 .. r0+nr`` x cols ``c0 .. c0+nc`` of matrix (b, h) of a 4-D-stepped view."""
    sb, sh, sr, sc = steps
    return view.ap([[sr, nr], [sc, nc]], offset=view.offset + b * sb + h * sh + r0 * sr + c0 * sc)


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(step, n - i)) for i in range(0, n, step)]


def _col(p, dtype=F32):
    return nl.ndarray((p, 1), dtype=dtype, buffer=nl.sbuf)


def _scores(s_ps, bias, bias_steps, b, h, l0, lt, s0, st, scale, causal):
    """The scaled, masked scores of a tile as (source, scale still to apply): PSUM itself when
    nothing is masked (ScalarE and VectorE read PSUM), else an fp32 SBUF tile."""
    diagonal = causal and s0 + st - 1 > l0
    if bias is None and not diagonal:
        return s_ps, scale
    x = nl.ndarray((lt, st), dtype=F32, buffer=nl.sbuf)
    if bias is not None:
        bt = nl.ndarray((lt, st), dtype=bias.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=_block(bias, bias_steps, b, h, l0, lt, s0, st))
        nisa.scalar_tensor_tensor(dst=x, data=s_ps, op0=A.multiply, operand0=scale, op1=A.add, operand1=bt)
    else:
        nisa.activation(dst=x, op=ActFunc.copy, data=s_ps, scale=scale)
    if diagonal:  # key s0 + j is visible from query l0 + p iff (l0 - s0) + p - j >= 0
        nisa.affine_select(dst=x, pattern=[[-1, st]], channel_multiplier=1, on_true_tile=x,
                           on_false_value=float("-inf"), cmp_op=A.greater_equal, offset=l0 - s0)
    return x, 1.0


def _visible(causal: bool, l0: int, lt: int, n_keys: int) -> int:
    """Keys a query tile sees: with ``is_causal`` (top-left aligned), none past its last row."""
    return min(n_keys, l0 + lt) if causal else n_keys


# ---------------------------------------------------------------- forward


def attention_fwd(out, lse, seed, offset, q, k, v, *bias, scale, causal, group):
    bias = bias[0] if bias else None
    B, H, L, E = _shape4(q)
    S, Ev = k.shape[-2], v.shape[-1]
    qs, ks, vs, os_ = _steps4(q), _steps4(k), _steps4(v), _steps4(out)
    bs = _steps4(bias) if bias is not None else None
    sl_b, sl_h, sl_l = (0,) * (3 - len(lse.dims)) + tuple(s for s, _ in lse.dims)
    pdt = v.dtype  # P meets V on TensorE in V's dtype
    blocks = _chunks(S, BLOCK)
    for b in range(B):
        for h in range(H):
            hk = h // group
            if h % group == 0:  # K^T and V of this KV head, resident for all its query heads
                kT = nl.ndarray((E, S), dtype=k.dtype, buffer=nl.sbuf)
                for s0, n in _chunks(S, K_TILE):
                    load_kxm(kT[:, s0:s0 + n], _block(k, ks, b, hk, s0, n, 0, E))
                vt = nl.ndarray((BLOCK, len(blocks), Ev), dtype=v.dtype, buffer=nl.sbuf)
                for j, (s0, n) in enumerate(blocks):
                    nisa.dma_copy(dst=vt[:n, j, :], src=_block(v, vs, b, hk, s0, n, 0, Ev))
            for l0, lt in _chunks(L, Q_TILE):
                qT = nl.ndarray((E, lt), dtype=q.dtype, buffer=nl.sbuf)
                load_kxm(qT, _block(q, qs, b, h, l0, lt, 0, E))
                m = total = acc = None
                for s0, st in _chunks(_visible(causal, l0, lt, S), K_TILE):
                    s_ps = nl.ndarray((lt, st), dtype=F32, buffer=nl.psum)
                    nisa.nc_matmul(dst=s_ps, stationary=qT, moving=kT[:, s0:s0 + st])
                    src, sc = _scores(s_ps, bias, bs, b, h, l0, lt, s0, st, scale, causal)
                    mx = _col(lt)
                    nisa.tensor_reduce(dst=mx, op=A.maximum, data=src, axis=1)
                    m_new = _col(lt)
                    nisa.tensor_scalar(dst=m_new, data=mx, op0=A.multiply, operand0=sc, op1=A.maximum,
                                       operand1=NEG_BIG if m is None else m)
                    neg = _col(lt)
                    nisa.tensor_scalar(dst=neg, data=m_new, op0=A.multiply, operand0=-1.0)
                    p = nl.ndarray((lt, st), dtype=pdt, buffer=nl.sbuf)
                    rowsum = _col(lt)
                    nisa.activation(dst=p, op=ActFunc.exp, data=src, bias=neg, scale=sc, reduce_res=rowsum)
                    pv = nl.ndarray((lt, Ev), dtype=F32, buffer=nl.psum)
                    for c0, cb in _chunks(st, BLOCK):
                        pT_ps = nl.ndarray((cb, lt), dtype=pdt, buffer=nl.psum)
                        nisa.nc_transpose(dst=pT_ps, data=p[:, c0:c0 + cb])
                        pT = nl.ndarray((cb, lt), dtype=pdt, buffer=nl.sbuf)
                        nisa.tensor_copy(dst=pT, src=pT_ps, engine=nisa.engine.scalar)
                        nisa.nc_matmul(dst=pv, stationary=pT, moving=vt[:cb, (s0 + c0) // BLOCK, :])
                    if m is None:
                        total, acc = rowsum, nl.ndarray((lt, Ev), dtype=F32, buffer=nl.sbuf)
                        nisa.tensor_copy(dst=acc, src=pv)
                    else:
                        alpha = _col(lt)  # exp(old max - new max): rescales what was summed so far
                        nisa.activation(dst=alpha, op=ActFunc.exp, data=m, bias=neg)
                        nisa.scalar_tensor_tensor(dst=total, data=total, op0=A.multiply, operand0=alpha,
                                                  op1=A.add, operand1=rowsum)
                        nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=A.multiply, operand0=alpha,
                                                  op1=A.add, operand1=pv)
                    m = m_new
                floor = _col(lt)
                nisa.tensor_scalar(dst=floor, data=total, op0=A.maximum, operand0=TINY)
                recip = _col(lt)
                nisa.reciprocal(dst=recip, data=floor)
                o = nl.ndarray((lt, Ev), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=o, data=acc, op0=A.multiply, operand0=recip)
                nisa.dma_copy(dst=_block(out, os_, b, h, l0, lt, 0, Ev), src=o)
                ln = _col(lt)
                nisa.activation(dst=ln, op=ActFunc.log, data=total)
                nisa.tensor_tensor(dst=ln, data1=ln, data2=m, op=A.add)
                lse_at = lse.offset + b * sl_b + h * sl_h + l0 * sl_l
                nisa.dma_copy(dst=lse.ap([[sl_l, lt], [1, 1]], offset=lse_at), src=ln)
    zero = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)  # no dropout: philox seed and offset 0
    nisa.memset(dst=zero, value=0.0)
    for t in (seed, offset):
        nisa.dma_copy(dst=t.ap([[2, 1], [1, 2]], offset=t.offset), src=zero)


# ---------------------------------------------------------------- backward


def attention_bwd(dq, dk, dv, g, q, k, v, o, lse, *bias, scale, causal, group):
    bias = bias[0] if bias else None
    B, H, L, E = _shape4(q)
    Hk, S, Ev = _shape4(k)[1], k.shape[-2], v.shape[-1]
    qs, ks, vs, gs, os_ = _steps4(q), _steps4(k), _steps4(v), _steps4(g), _steps4(o)
    dqs, dks, dvs = _steps4(dq), _steps4(dk), _steps4(dv)
    bs = _steps4(bias) if bias is not None else None
    sl_b, sl_h, sl_l = (0,) * (3 - len(lse.dims)) + tuple(s for s, _ in lse.dims)
    pdt = q.dtype
    q_tiles = _chunks(L, Q_TILE)
    nq = len(q_tiles)
    for b in range(B):
        for hk in range(Hk):
            heads = range(hk * group, (hk + 1) * group)
            side = {}  # per head: Q^T, Q rows, dO^T, dO rows, -lse, D, the dQ accumulator
            for h in heads:
                qT = nl.ndarray((E, L), dtype=q.dtype, buffer=nl.sbuf)
                gT = nl.ndarray((Ev, L), dtype=g.dtype, buffer=nl.sbuf)
                qr = nl.ndarray((Q_TILE, nq, E), dtype=q.dtype, buffer=nl.sbuf)
                gr = nl.ndarray((Q_TILE, nq, Ev), dtype=g.dtype, buffer=nl.sbuf)
                neg_lse = nl.ndarray((Q_TILE, nq), dtype=F32, buffer=nl.sbuf)
                dsum = nl.ndarray((Q_TILE, nq), dtype=F32, buffer=nl.sbuf)
                for i, (l0, lt) in enumerate(q_tiles):
                    load_kxm(qT[:, l0:l0 + lt], _block(q, qs, b, h, l0, lt, 0, E))
                    load_kxm(gT[:, l0:l0 + lt], _block(g, gs, b, h, l0, lt, 0, Ev))
                    nisa.dma_copy(dst=qr[:lt, i, :], src=_block(q, qs, b, h, l0, lt, 0, E))
                    nisa.dma_copy(dst=gr[:lt, i, :], src=_block(g, gs, b, h, l0, lt, 0, Ev))
                    ot = nl.ndarray((lt, Ev), dtype=o.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=ot, src=_block(o, os_, b, h, l0, lt, 0, Ev))
                    prod = nl.ndarray((lt, Ev), dtype=F32, buffer=nl.sbuf)
                    nisa.tensor_tensor(dst=prod, data1=gr[:lt, i, :], data2=ot, op=A.multiply)
                    nisa.tensor_reduce(dst=dsum[:lt, i:i + 1], op=A.add, data=prod, axis=1)
                    lt_col = _col(lt)
                    nisa.dma_copy(dst=lt_col, src=lse.ap([[sl_l, lt], [1, 1]],
                                                         offset=lse.offset + b * sl_b + h * sl_h + l0 * sl_l))
                    # -lse, capped: a fully masked row (lse = -inf) gets exp(-inf + cap) = 0
                    nisa.tensor_scalar(dst=neg_lse[:lt, i:i + 1], data=lt_col, op0=A.multiply, operand0=-1.0,
                                       op1=A.minimum, operand1=-NEG_BIG)
                acc = nl.ndarray((Q_TILE, nq, E), dtype=F32, buffer=nl.sbuf)
                side[h] = (qT, qr, gT, gr, neg_lse, dsum, acc)
            for kt_index, (s0, st) in enumerate(_chunks(S, BLOCK)):
                kT = nl.ndarray((E, st), dtype=k.dtype, buffer=nl.sbuf)
                load_kxm(kT, _block(k, ks, b, hk, s0, st, 0, E))
                vT = nl.ndarray((Ev, st), dtype=v.dtype, buffer=nl.sbuf)
                load_kxm(vT, _block(v, vs, b, hk, s0, st, 0, Ev))
                kr = nl.ndarray((st, E), dtype=k.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=kr, src=_block(k, ks, b, hk, s0, st, 0, E))
                dv_ps = nl.ndarray((st, Ev), dtype=F32, buffer=nl.psum)
                dk_ps = nl.ndarray((st, E), dtype=F32, buffer=nl.psum)
                touched = False
                for h in heads:
                    qT, qr, gT, gr, neg_lse, dsum, acc = side[h]
                    for i, (l0, lt) in enumerate(q_tiles):
                        if causal and s0 > l0 + lt - 1:
                            continue  # every key of this tile is after every query of it
                        touched = True
                        s_ps = nl.ndarray((lt, st), dtype=F32, buffer=nl.psum)
                        nisa.nc_matmul(dst=s_ps, stationary=qT[:, l0:l0 + lt], moving=kT)
                        src, sc = _scores(s_ps, bias, bs, b, h, l0, lt, s0, st, scale, causal)
                        p = nl.ndarray((lt, st), dtype=pdt, buffer=nl.sbuf)
                        nisa.activation(dst=p, op=ActFunc.exp, data=src, bias=neg_lse[:lt, i:i + 1], scale=sc)
                        nisa.nc_matmul(dst=dv_ps, stationary=p, moving=gr[:lt, i, :])
                        dp_ps = nl.ndarray((lt, st), dtype=F32, buffer=nl.psum)
                        nisa.nc_matmul(dst=dp_ps, stationary=gT[:, l0:l0 + lt], moving=vT)
                        ds = nl.ndarray((lt, st), dtype=pdt, buffer=nl.sbuf)
                        nisa.scalar_tensor_tensor(dst=ds, data=dp_ps, op0=A.subtract,
                                                  operand0=dsum[:lt, i:i + 1], op1=A.multiply, operand1=p)
                        nisa.nc_matmul(dst=dk_ps, stationary=ds, moving=qr[:lt, i, :])
                        dsT_ps = nl.ndarray((st, lt), dtype=pdt, buffer=nl.psum)
                        nisa.nc_transpose(dst=dsT_ps, data=ds)
                        dsT = nl.ndarray((st, lt), dtype=pdt, buffer=nl.sbuf)
                        nisa.tensor_copy(dst=dsT, src=dsT_ps, engine=nisa.engine.scalar)
                        dq_ps = nl.ndarray((lt, E), dtype=F32, buffer=nl.psum)
                        nisa.nc_matmul(dst=dq_ps, stationary=dsT, moving=kr)
                        if kt_index == 0:  # key 0 is seen by every query: the first write
                            nisa.tensor_copy(dst=acc[:lt, i, :], src=dq_ps)
                        else:
                            part = acc[:lt, i, :]
                            nisa.tensor_tensor(dst=part, data1=part, data2=dq_ps, op=A.add)
                dkt = nl.ndarray((st, E), dtype=dk.dtype, buffer=nl.sbuf)
                dvt = nl.ndarray((st, Ev), dtype=dv.dtype, buffer=nl.sbuf)
                if touched:
                    nisa.tensor_scalar(dst=dkt, data=dk_ps, op0=A.multiply, operand0=scale)
                    nisa.tensor_copy(dst=dvt, src=dv_ps)
                else:  # keys no query sees (causal, more keys than queries)
                    nisa.memset(dst=dkt, value=0.0)
                    nisa.memset(dst=dvt, value=0.0)
                nisa.dma_copy(dst=_block(dk, dks, b, hk, s0, st, 0, E), src=dkt)
                nisa.dma_copy(dst=_block(dv, dvs, b, hk, s0, st, 0, Ev), src=dvt)
            for h in heads:
                acc = side[h][6]
                for i, (l0, lt) in enumerate(q_tiles):
                    dqt = nl.ndarray((lt, E), dtype=dq.dtype, buffer=nl.sbuf)
                    nisa.tensor_scalar(dst=dqt, data=acc[:lt, i, :], op0=A.multiply, operand0=scale)
                    nisa.dma_copy(dst=_block(dq, dqs, b, h, l0, lt, 0, E), src=dqt)


# ---------------------------------------------------------------- what is covered


def _broadcasts(mask: torch.Tensor, shape: tuple[int, ...]) -> bool:
    if mask.dim() > len(shape):
        return False
    return all(m in (1, n) for m, n in zip(reversed(mask.shape), reversed(shape), strict=False))


def _uncovered(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa) -> str | None:
    """Why the fused kernels do not take this call (None: they do). Invalid calls are uncovered too:
    the math path raises ATen's own error for them."""
    tensors = (q, k, v) if mask is None else (q, k, v, mask)
    if not all(isinstance(t, torch.Tensor) and t.layout is torch.strided and not t.is_cpu for t in tensors):
        return "not dense device tensors"
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes {q.dtype}, {k.dtype}, {v.dtype}"
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        return "q, k, v must all be 3-D or 4-D"
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0:
        return "empty"
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        return "shapes do not pair"
    h, hk = q.shape[-3], k.shape[-3]
    if h != hk and not (enable_gqa and h % hk == 0):
        return "heads do not pair"
    if max(q.shape[-1], v.shape[-1]) > HEAD_DIM_MAX:
        return f"head dim above {HEAD_DIM_MAX}"
    if dropout_p != 0.0:
        return "dropout"
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        return "scale must be positive"  # the running max relies on max(scale * s) = scale * max(s)
    if mask is not None:
        if is_causal:
            return "a mask and is_causal"
        if mask.requires_grad:
            return "a mask that needs a gradient"
        if mask.dtype not in (torch.bool, q.dtype):
            return f"mask dtype {mask.dtype}"
        if not _broadcasts(mask, (*q.shape[:-1], k.shape[-2])):
            return "mask does not broadcast"
    return _resident(q, k, v)


def _resident(q, k, v) -> str | None:
    """SBUF bytes per partition the kernels keep: a head's K^T and V (forward); a GQA group's Q^T,
    dO^T, Q and dO rows and the fp32 dQ accumulator (backward)."""
    isz = q.element_size()
    L, E = q.shape[-2:]
    S, Ev = v.shape[-2:]
    group = q.shape[-3] // k.shape[-3]
    nq, nk = -(-L // Q_TILE), -(-S // BLOCK)
    fwd = S * isz + nk * Ev * isz
    bwd = group * (L * isz * 2 + nq * (E + Ev) * isz + nq * (E + 2) * 4)
    if max(fwd, bwd) > RESIDENT_BYTES:
        return "sequences too long for resident K/V and Q/dO"
    return None


def _scale(scale, q) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])


# ---------------------------------------------------------------- planners


@native("aten::_fused_sdp_choice.default", answers=True)
def choose_sdp_backend(call: Call) -> int:
    """``_fused_sdp_choice`` on neuron tensors: the SDPBackend number, decided on the host from the
    call's shapes and flags (no Program, nothing charged)."""
    q, k, v = call.arg(0, "query"), call.arg(1, "key"), call.arg(2, "value")
    why = _uncovered(q, k, v, call.arg(3, "attn_mask"), call.arg(4, "dropout_p", 0.0),
                     call.arg(5, "is_causal", False), call.kwargs.get("scale"),
                     call.kwargs.get("enable_gqa", False))
    enabled = torch._C._get_overrideable_sdp_enabled()  # sdpa_kernel(...) may have ruled it out
    return OVERRIDEABLE if why is None and enabled else MATH


@native("aten::_scaled_dot_product_fused_attention_overrideable.default")
def plan_attention(call: Call) -> Launch | None:
    q, k, v, bias = (call.arg(i, n) for i, n in enumerate(("query", "key", "value", "attn_bias")))
    causal, scale = bool(call.arg(5, "is_causal", False)), call.kwargs.get("scale")
    if call.arg(6, "return_debug_mask", False) or (bias is not None and bias.dtype != q.dtype):
        return None
    if _uncovered(q, k, v, bias, call.arg(4, "dropout_p", 0.0), causal, scale, True) is not None:
        return None
    L, S = q.shape[-2], k.shape[-2]
    ins = [t for t in (q, k, v, bias) if t is not None]
    flops = 2.0 * math.prod(q.shape[:-1]) * S * (q.shape[-1] + v.shape[-1]) / (2 if causal else 1)
    return Launch(attention_fwd, (OUT(0), OUT(1), OUT(2), OUT(3), *(IN(_position(call, t)) for t in ins)),
                  {"scale": _scale(scale, q), "causal": causal, "group": q.shape[-3] // k.shape[-3]},
                  flops=flops,
                  # output, logsumexp, cum_seq_q/k, max_q/k, philox seed/offset, debug mask
                  result=lambda outs: (outs[0], outs[1], None, None, L, S, outs[2], outs[3], None))


@native("aten::_scaled_dot_product_fused_attention_overrideable_backward.default")
def plan_attention_backward(call: Call) -> Launch | None:
    names = ("grad_out", "query", "key", "value", "attn_bias", "grad_input_mask", "out", "logsumexp")
    g, q, k, v, bias, mask, o, lse = (call.arg(i, n) for i, n in enumerate(names))
    causal, scale = bool(call.arg(13, "is_causal", False)), call.kwargs.get("scale")
    if bias is not None and (mask[3] or bias.dtype != q.dtype):
        return None  # a mask's gradient is not computed (SDPA routes such calls to the math path)
    if _uncovered(q, k, v, bias, call.arg(12, "dropout_p", 0.0), causal, scale, True) is not None:
        return None
    if g.dtype != q.dtype or g.shape != o.shape or o.dtype != q.dtype or lse.dtype != torch.float32:
        return None
    ins = [t for t in (g, q, k, v, o, lse, bias) if t is not None]
    flops = 4.0 * math.prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1]) / (2 if causal else 1)
    return Launch(attention_bwd, (OUT(0), OUT(1), OUT(2), *(IN(_position(call, t)) for t in ins)),
                  {"scale": _scale(scale, q), "causal": causal, "group": q.shape[-3] // k.shape[-3]},
                  flops=flops, result=lambda outs: (outs[0], outs[1], outs[2], None))
