"""Matrix multiplication: ``mm`` and ``addmm`` (which ``linear`` and the backward matmuls reach).

``out[M, N] = a[M, K] @ b[K, N]`` on TensorE: ``nc_matmul`` computes ``stationary.T @ moving``
with the contraction dim on the partitions, so each K-chunk of 128 needs ``a`` as ``[K, M]``
(stationary, M-tiles of 128) and ``b`` as ``[K, N]`` (moving, N-tiles of 512, one PSUM bank of
fp32). K-chunks accumulate in PSUM; the finished bank is copied (``addmm``: added to the bias) into
an SBUF row and stored.

Operands come in either layout, as torch hands them over: a row-major ``a`` (K contiguous) is
transposed on the way in by ``dma_transpose``, a column-major one (``x.t()``) is a plain strided
load; ``b`` likewise (``linear``'s ``weight.t()`` is K-contiguous). So TensorE only multiplies.

Schedule, for a TensorE-bound large matmul: the output is cut into groups of 8 PSUM banks (4 M-tiles
x 2 N-tiles of 512); each group accumulates over K outermost, so its first matmuls need only the
first K-chunk's pieces (``a[m-group, k-chunk]`` and ``b[k-chunk, n-panel]``), which arrive after
two DMAs instead of after all of K. The pieces of the next K-steps are issued a few steps ahead
(no more: a load ready at once takes the earliest DMA window, so loads issued far ahead would
hold the DMA engines the finished group's stores need); pieces reused by later groups (all of
``a``, or one panel of ``b``, when they fit ``RESIDENT_BYTES``) are loaded once. At the end of a
group its banks are evacuated by VectorE and ScalarE in turn while TensorE starts the next group
on the banks freed first.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import AluOp

# nc_matmul tile sizes and PSUM banks come from the chip traced for (``nl.tile_size``), in each function.
PANEL_BANKS = 2  # PSUM banks across an output group (1024 fp32 columns), so a group is 4 M-tiles tall
RESIDENT_BYTES = 64 * 1024  # per partition: an operand this small stays in SBUF once loaded
IN_FLIGHT_BYTES = 48 * 1024  # per partition: operand pieces loaded ahead of TensorE
# K-steps loaded ahead: a DMA ready early is scheduled early, so loads issued too far ahead in
# program order would take the DMA windows the stores of the finished group need.
MAX_AHEAD = 4


def _chunks(start, stop, step):
    return [(i, min(step, stop - i)) for i in range(start, stop, step)]


def load_kxm(dst, src_mk):
    """dst [k, m] <- src_mk [m, k] (an HBM view): a DMA transpose if k is contiguous, else a load."""
    if src_mk.dims[1][0] == 1 and src_mk.dims[0][0] != 1 and src_mk.shape[0] > 1:
        nisa.dma_transpose(dst=dst, src=src_mk)
    else:
        nisa.dma_copy(dst=dst, src=src_mk.permute((1, 0)))


def matmul(out, a, b, bias=None):
    """``out = a @ b (+ bias)``, output groups of 8 PSUM banks, K accumulated outermost per group.

    The operand pieces of K-step ``s + ahead`` are issued before the matmuls of step ``s``, so
    their SBUF bytes never wait for readers still in flight and the DMA queues run ahead of
    TensorE; pieces reused by later groups (all of ``a`` or the moving panel, when they fit
    ``RESIDENT_BYTES``) are loaded once.
    """
    PSUM_BANKS = nl.tile_size.psum_num_banks  # one output group holds them all
    TILE_K = nl.tile_size.pmax  # contraction per nc_matmul: the PE array's rows
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    TILE_N = nl.tile_size.gemm_moving_fmax  # moving free size: one PSUM bank of fp32
    M, K = a.shape
    N = b.shape[1]
    isz = max(a.dtype.itemsize, b.dtype.itemsize)
    ks = _chunks(0, K, TILE_K)
    pn = min(N, PANEL_BANKS * TILE_N)
    pm = min(M, PSUM_BANKS // -(-pn // TILE_N) * TILE_M)
    keep_a = len(ks) * M * isz <= RESIDENT_BYTES  # the stationary tiles of every group
    keep_b = len(ks) * pn * isz <= RESIDENT_BYTES  # one moving panel, for all its M-groups
    groups = [(m0, ms, n0, ns) for n0, ns in _chunks(0, N, pn) for m0, ms in _chunks(0, M, pm)]
    steps = [(g, k) for g in range(len(groups)) for k in range(len(ks))]
    ahead = max(1, min(MAX_AHEAD, IN_FLIGHT_BYTES // ((pm + pn) * isz)))
    pieces = {}

    def piece(which, key, load):
        t = pieces.get((which, key))
        if t is None:
            t = load()
            if (keep_a if which == "a" else keep_b):
                pieces[(which, key)] = t
        return t

    def load(s):
        g, k = steps[s]
        m0, ms, n0, ns = groups[g]
        k0, kt = ks[k]

        def stationary():
            t = nl.ndarray((kt, ms), dtype=a.dtype, buffer=nl.sbuf)
            load_kxm(t, a[m0:m0 + ms, k0:k0 + kt])
            return t

        def moving():
            t = nl.ndarray((kt, ns), dtype=b.dtype, buffer=nl.sbuf)
            load_kxm(t, b[k0:k0 + kt, n0:n0 + ns].permute((1, 0)))
            return t

        return piece("a", (m0, k0), stationary), piece("b", (n0, k0), moving)

    loaded = [load(s) for s in range(min(ahead, len(steps)))]
    shared_bias = {}
    accs = None
    for s, (g, k) in enumerate(steps):
        if s + ahead < len(steps):
            loaded.append(load(s + ahead))
        st, mv = loaded[s]
        loaded[s] = None
        m0, ms, n0, ns = groups[g]
        m_tiles, n_tiles = _chunks(0, ms, TILE_M), _chunks(0, ns, TILE_N)
        if k == 0:
            accs = [[nl.ndarray((mt, nt), dtype=nl.float32, buffer=nl.psum) for _, nt in n_tiles]
                    for _, mt in m_tiles]
        for (mi, mt), row in zip(m_tiles, accs, strict=True):
            for (ni, nt), acc in zip(n_tiles, row, strict=True):
                nisa.nc_matmul(dst=acc, stationary=st[:, mi:mi + mt], moving=mv[:, ni:ni + nt])
        if k == len(ks) - 1:
            _evacuate(out, accs, bias, shared_bias, m0, m_tiles, n0, ns)


def _bias_tile(bias, shared, m0, mt, n0, ns):
    """bias[m0:m0+mt, n0:n0+ns] in SBUF; a row-broadcast bias is loaded once per panel."""
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    if bias.dims[0][0] == 0:
        if n0 not in shared:
            t = nl.ndarray((TILE_M if bias.shape[0] >= TILE_M else bias.shape[0], ns), dtype=bias.dtype,
                           buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=bias[0:t.shape[0], n0:n0 + ns])
            shared[n0] = t
        return shared[n0][:mt]
    t = nl.ndarray((mt, ns), dtype=bias.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=bias[m0:m0 + mt, n0:n0 + ns])
    return t


def _evacuate(out, accs, bias, shared_bias, m0, m_tiles, n0, ns):
    """out[m0:, n0:n0+ns] <- a group's PSUM banks (+ bias), one SBUF row per M-tile.

    VectorE and ScalarE copy the banks in turn, so they free up about as fast as TensorE refills
    them; every row is written before any is stored, so the rows get distinct bytes and no copy
    waits for the store of the row before it.
    """
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    TILE_N = nl.tile_size.gemm_moving_fmax  # moving free size: one PSUM bank of fp32
    rows = []
    for (mi, mt), banks in zip(m_tiles, accs, strict=True):
        bias_tile = None if bias is None else _bias_tile(bias, shared_bias, m0 + mi, mt, n0, ns)
        row = nl.ndarray((mt, ns), dtype=out.dtype, buffer=nl.sbuf)
        for j, ((ni, nt), acc) in enumerate(zip(_chunks(0, ns, TILE_N), banks, strict=True)):
            if bias_tile is not None:
                nisa.tensor_tensor(dst=row[:, ni:ni + nt], data1=acc, data2=bias_tile[:, ni:ni + nt],
                                   op=AluOp.add)
            else:
                eng = nisa.engine.scalar if (mi // TILE_M + j) % 2 else nisa.engine.vector
                nisa.tensor_copy(dst=row[:, ni:ni + nt], src=acc, engine=eng)
        rows.append(row)
    for (mi, mt), row in zip(m_tiles, rows, strict=True):
        nisa.dma_copy(dst=out[m0 + mi:m0 + mi + mt, n0:n0 + ns], src=row)


def mm(out, a, b):
    matmul(out, a, b)


def addmm(out, bias, a, b):
    matmul(out, a, b, bias=bias.broadcast_to(out.shape))


# ---------------------------------------------------------------- batched: bmm, baddbmm

BATCH_BYTES = 64 * 1024  # per partition: the SBUF tiles of one chunk of batch items


def _item_bytes(M, K, N, isz, osz):
    """SBUF bytes per partition one item takes in the packed kernel (every tile it has a part of)."""
    TILE_K = nl.tile_size.pmax  # contraction per nc_matmul: the PE array's rows
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    kc, mt, nt = -(-K // TILE_K), -(-M // TILE_M), -(-N // TILE_M)
    return kc * (M + N) * isz + (mt + nt) * K * isz + 2 * mt * N * osz  # + the result and bias rows


def _natural(view_bmk):
    """Whether a [B, R, K] operand has K contiguous: it then loads as rows [R, B, K] and TensorE
    transposes it (a DMA transpose per item would cost a DMA's fixed time per item)."""
    return view_bmk.dims[2][0] == 1 and view_bmk.shape[2] > 1


class _Engines:
    """VectorE and ScalarE in turn, for PSUM evacuations."""

    def __init__(self):
        self.n = 0

    def next(self):
        self.n += 1
        return nisa.engine.scalar if self.n % 2 else nisa.engine.vector


def _k_major(view_brk, i0, nb, K, dtype, engines):
    """Per K-chunk, the SBUF tile [kt, nb, R] of ``view_brk`` [B, R, K] items ``i0 .. i0+nb``:
    one strided load if K is not contiguous, else row loads and TensorE transposes."""
    TILE_K = nl.tile_size.pmax  # contraction per nc_matmul: the PE array's rows
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    R = view_brk.shape[1]
    ks = _chunks(0, K, TILE_K)
    tiles = [nl.ndarray((kt, nb, R), dtype=dtype, buffer=nl.sbuf) for _, kt in ks]
    items = view_brk[i0:i0 + nb]
    if not _natural(view_brk):
        for (k0, kt), t in zip(ks, tiles, strict=True):
            nisa.dma_copy(dst=t, src=items[:, :, k0:k0 + kt].permute((2, 0, 1)))
        return tiles
    for r0, rt in _chunks(0, R, TILE_M):
        rows = nl.ndarray((rt, nb, K), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=items[:, r0:r0 + rt, :].permute((1, 0, 2)))
        per_bank = max(1, nl.tile_size.psum_bank_fmax_bytes // (rt * dtype.itemsize))  # items per bank
        for (k0, kt), t in zip(ks, tiles, strict=True):
            for j0, jn in _chunks(0, nb, per_bank):
                ps = nl.ndarray((kt, jn, rt), dtype=dtype, buffer=nl.psum)
                for j in range(jn):
                    nisa.nc_transpose(dst=ps[:, j, :], data=rows[:, j0 + j, k0:k0 + kt])
                nisa.tensor_copy(dst=t[:, j0:j0 + jn, r0:r0 + rt], src=ps, engine=engines.next())
    return tiles


def batched(out, a, b, bias=None, alpha=1.0):
    """``out[i] = alpha * a[i] @ b[i] (+ bias[i])`` for many small items, chunk by chunk of items:
    one DMA loads an operand for the whole chunk, TensorE transposes what arrives K-contiguous,
    matmuls write several items side by side in a PSUM bank, one copy evacuates the bank and one
    DMA stores the chunk. Chunks are an ``affine_range``: their tiles rotate, so the loads of the
    next chunk overlap this one's matmuls."""
    TILE_M = nl.tile_size.gemm_stationary_fmax  # stationary free size
    TILE_N = nl.tile_size.gemm_moving_fmax  # moving free size: one PSUM bank of fp32
    B, M, K = a.shape
    N = b.shape[2]
    isz = max(a.dtype.itemsize, b.dtype.itemsize)
    nb = max(1, min(B, BATCH_BYTES // _item_bytes(M, K, N, isz, out.dtype.itemsize)))
    per_bank = max(1, TILE_N // N)  # items side by side in one PSUM bank
    bt = b.permute((0, 2, 1))  # [B, N, K]
    engines = _Engines()
    for i0 in nl.affine_range(0, B, nb):
        n_items = min(nb, B - i0)
        stat = _k_major(a, i0, n_items, K, a.dtype, engines)
        mov = _k_major(bt, i0, n_items, K, b.dtype, engines)
        for m0, mt in _chunks(0, M, TILE_M):
            res = nl.ndarray((mt, n_items, N), dtype=out.dtype, buffer=nl.sbuf)
            if bias is not None:
                bias_t = nl.ndarray((mt, n_items, N), dtype=bias.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=bias_t, src=bias[i0:i0 + n_items, m0:m0 + mt, :].permute((1, 0, 2)))
            for j0, jn in _chunks(0, n_items, per_bank):
                acc = nl.ndarray((mt, jn, N), dtype=nl.float32, buffer=nl.psum)
                for j in range(jn):
                    for st, mv in zip(stat, mov, strict=True):
                        nisa.nc_matmul(dst=acc[:, j, :], stationary=st[:, j0 + j, m0:m0 + mt],
                                       moving=mv[:, j0 + j, :])
                dst = res[:, j0:j0 + jn, :]
                if bias is not None:
                    nisa.scalar_tensor_tensor(dst=dst, data=acc, op0=AluOp.multiply, operand0=alpha,
                                              op1=AluOp.add, operand1=bias_t[:, j0:j0 + jn, :])
                elif alpha != 1.0:
                    nisa.tensor_scalar(dst=dst, data=acc, op0=AluOp.multiply, operand0=alpha,
                                       engine=engines.next())
                else:
                    nisa.tensor_copy(dst=dst, src=acc, engine=engines.next())
            nisa.dma_copy(dst=out[i0:i0 + n_items, m0:m0 + mt, :].permute((1, 0, 2)), src=res)


def bmm(out, a, b, *, packed):
    if packed:
        batched(out, a, b)
    else:
        for i in range(a.shape[0]):
            matmul(out[i], a[i], b[i])


def baddbmm(out, bias, a, b, *, packed, alpha, beta):
    bias = bias.broadcast_to(out.shape) if beta else None
    if packed:
        batched(out, a, b, bias=bias, alpha=alpha)
    else:
        for i in range(a.shape[0]):
            matmul(out[i], a[i], b[i], bias=None if bias is None else bias[i])


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _covered(call: Call, a, b, dim=2) -> bool:
    return (
        a.dim() == dim and b.dim() == dim
        and a.dtype == b.dtype == call.outputs[0].dtype and a.dtype in _DTYPES
    )


@native("aten::mm.default", "aten::mm.out")
def plan_mm(call: Call) -> Launch | None:
    a, b = call.inputs[0], call.inputs[1]
    if len(call.inputs) != 2 or not _covered(call, a, b):
        return None
    M, K = a.shape
    return Launch(mm, (OUT(0), IN(0), IN(1)), flops=2.0 * M * K * b.shape[1])


@native("aten::addmm.default")
def plan_addmm(call: Call) -> Launch | None:
    if len(call.inputs) != 3:
        return None
    bias, a, b = call.inputs
    beta, alpha = call.arg(3, "beta", 1), call.arg(4, "alpha", 1)
    if beta != 1 or alpha != 1 or not _covered(call, a, b) or bias.dtype != a.dtype:
        return None
    M, K = a.shape
    return Launch(addmm, (OUT(0), IN(0), IN(1), IN(2)), flops=2.0 * M * K * b.shape[1])


def _packed(a, b, out) -> bool:
    """Whether the items are small enough for the packed kernel (else one tiled matmul per item)."""
    TILE_N = nl.tile_size.gemm_moving_fmax  # moving free size: one PSUM bank of fp32
    _, M, K = a.shape
    N = b.shape[2]
    return N <= TILE_N and _item_bytes(M, K, N, a.dtype.itemsize, out.dtype.itemsize) <= BATCH_BYTES


@native("aten::bmm.default")
def plan_bmm(call: Call) -> Launch | None:
    a, b = call.inputs[0], call.inputs[1]
    if len(call.inputs) != 2 or not _covered(call, a, b, dim=3):
        return None
    B, M, K = a.shape
    return Launch(bmm, (OUT(0), IN(0), IN(1)), {"packed": _packed(a, b, call.outputs[0])},
                  flops=2.0 * B * M * K * b.shape[2])


@native("aten::baddbmm.default")
def plan_baddbmm(call: Call) -> Launch | None:
    if len(call.inputs) != 3:
        return None
    bias, a, b = call.inputs
    beta, alpha = call.arg(3, "beta", 1), call.arg(4, "alpha", 1)
    if not (_covered(call, a, b, dim=3) and bias.dtype == a.dtype and beta in (0, 1)
            and isinstance(alpha, int | float) and math.isfinite(alpha)):
        return None
    packed = _packed(a, b, call.outputs[0])
    if not packed and alpha != 1:
        return None  # the tiled kernel adds the bias but does not scale
    B, M, K = a.shape
    return Launch(baddbmm, (OUT(0), IN(0), IN(1), IN(2)),
                  {"packed": packed, "alpha": float(alpha), "beta": int(beta)},
                  flops=2.0 * B * M * K * b.shape[2])


def ideal_ns(M: int, K: int, N: int, chip) -> float:
    """TensorE-bound time of an [M, K] x [K, N] bf16 matmul: FLOPs over the chip's peak."""
    return 2.0 * M * K * N / chip.tensor_engine_peak_flops_bf16 * 1e9

