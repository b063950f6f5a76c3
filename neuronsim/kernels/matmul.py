"""Matrix multiplication: ``mm`` and ``addmm`` (which ``linear`` and the backward matmuls reach).

``out[M, N] = a[M, K] @ b[K, N]`` on TensorE: ``nc_matmul`` computes ``stationary.T @ moving``
with the contraction dim on the partitions, so each K-chunk of 128 needs ``a`` as ``[K, M]``
(stationary, M-tiles of 128) and ``b`` as ``[K, N]`` (moving, N-tiles of 512, one PSUM bank of
fp32). K-chunks accumulate in PSUM; the finished bank is copied (``addmm``: added to the bias) into
an SBUF row and stored.

Operands come in either layout, as torch hands them over: a row-major ``a`` (K contiguous) is
transposed on the way in by ``dma_transpose``, a column-major one (``x.t()``) is a plain strided
load; ``b`` likewise (``linear``'s ``weight.t()`` is K-contiguous). So TensorE only multiplies.

Blocking, for DMA efficiency (a transfer costs at least ``dma_fixed_cost_ns`` however small, and
a 128-partition transfer occupies all 16 DMA engines): the stationary tiles of an M block (as many
rows as fit 64 KiB per partition for all of K) are loaded once and reused for every N block; the
moving tiles of an N block (about 4 KiB per partition: 2048 bf16 / 1024 fp32 columns) are loaded
once per M block and reused by all its M-tiles.
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
BLOCK_BYTES = 4096  # per partition of a moving block
STATIONARY_BUDGET_BYTES = 64 * 1024  # per partition: the stationary tiles of one M block, all of K


def _load_kxm(dst, src_mk):
    """dst [k, m] <- src_mk [m, k] (an HBM view): a DMA transpose if k is contiguous, else a load."""
    if src_mk.dims[1][0] == 1 and src_mk.dims[0][0] != 1 and src_mk.shape[0] > 1:
        nisa.dma_transpose(dst=dst, src=src_mk)
    else:
        nisa.dma_copy(dst=dst, src=src_mk.permute((1, 0)))


def matmul(out, a, b, bias=None):
    M, K = a.shape
    N = b.shape[1]
    block_n = max(TILE_N, BLOCK_BYTES // b.dtype.itemsize // TILE_N * TILE_N)
    k_tiles = [(k0, min(TILE_K, K - k0)) for k0 in range(0, K, TILE_K)]
    block_m = STATIONARY_BUDGET_BYTES // (len(k_tiles) * a.dtype.itemsize) // TILE_M * TILE_M
    block_m = max(TILE_M, min(block_m, M))
    for mb0 in nl.affine_range(0, M, block_m):
        mbs = min(block_m, M - mb0)
        stationary = []
        for k0, kt in k_tiles:
            t = nl.ndarray((kt, mbs), dtype=a.dtype, buffer=nl.sbuf)
            _load_kxm(t, a[mb0:mb0 + mbs, k0:k0 + kt])
            stationary.append(t)
        for nb0 in nl.affine_range(0, N, block_n):
            nbs = min(block_n, N - nb0)
            moving = []
            for k0, kt in k_tiles:
                t = nl.ndarray((kt, nbs), dtype=b.dtype, buffer=nl.sbuf)
                _load_kxm(t, b[k0:k0 + kt, nb0:nb0 + nbs].permute((1, 0)))
                moving.append(t)
            for mi in nl.affine_range(0, mbs, TILE_M):
                mt = min(TILE_M, mbs - mi)
                m0 = mb0 + mi
                if bias is not None:
                    bias_tile = nl.ndarray((mt, nbs), dtype=bias.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=bias_tile, src=bias[m0:m0 + mt, nb0:nb0 + nbs])
                row = nl.ndarray((mt, nbs), dtype=out.dtype, buffer=nl.sbuf)
                for ni in nl.affine_range(0, nbs, TILE_N):
                    nt = min(TILE_N, nbs - ni)
                    acc = nl.ndarray((mt, nt), dtype=nl.float32, buffer=nl.psum)
                    for s, m in zip(stationary, moving, strict=True):
                        nisa.nc_matmul(dst=acc, stationary=s[:, mi:mi + mt], moving=m[:, ni:ni + nt])
                    if bias is None:
                        nisa.tensor_copy(dst=row[:, ni:ni + nt], src=acc)
                    else:
                        nisa.tensor_tensor(dst=row[:, ni:ni + nt], data1=acc, data2=bias_tile[:, ni:ni + nt],
                                           op=AluOp.add)
                nisa.dma_copy(dst=out[m0:m0 + mt, nb0:nb0 + nbs], src=row)


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

