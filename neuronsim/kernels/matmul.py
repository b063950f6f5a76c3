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

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.sim.ir import AluOp

TILE_K = 128  # contraction per nc_matmul: the PE array's rows
TILE_M = 128  # stationary free size
TILE_N = 512  # moving free size: one 2 KiB PSUM bank of fp32
PSUM_BANKS = 8  # per partition (chips/*.toml psum_banks): one output group holds them all
PANEL_N = 1024  # columns of an output group: 2 banks wide, so a group is 4 M-tiles tall
RESIDENT_BYTES = 64 * 1024  # per partition: an operand this small stays in SBUF once loaded
IN_FLIGHT_BYTES = 48 * 1024  # per partition: operand pieces loaded ahead of TensorE
# K-steps loaded ahead: a DMA ready early is scheduled early, so loads issued too far ahead in
# program order would take the DMA windows the stores of the finished group need.
MAX_AHEAD = 4


def _chunks(start, stop, step):
    return [(i, min(step, stop - i)) for i in range(start, stop, step)]


def _load_kxm(dst, src_mk):
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
    M, K = a.shape
    N = b.shape[1]
    isz = max(a.dtype.itemsize, b.dtype.itemsize)
    ks = _chunks(0, K, TILE_K)
    pn = min(N, PANEL_N)
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
            _load_kxm(t, a[m0:m0 + ms, k0:k0 + kt])
            return t

        def moving():
            t = nl.ndarray((kt, ns), dtype=b.dtype, buffer=nl.sbuf)
            _load_kxm(t, b[k0:k0 + kt, n0:n0 + ns].permute((1, 0)))
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


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _covered(call: Call, a, b) -> bool:
    return (
        a.dim() == 2 and b.dim() == 2
        and a.dtype == b.dtype == call.outputs[0].dtype and a.dtype in _DTYPES
    )


@native("aten::mm.default")
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


def ideal_ns(M: int, K: int, N: int, chip) -> float:
    """TensorE-bound time of an [M, K] x [K, N] bf16 matmul: FLOPs over the chip's peak."""
    return 2.0 * M * K * N / chip.tensor_engine_peak_flops_bf16 * 1e9

