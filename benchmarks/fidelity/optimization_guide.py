"""The matmul kernels of AWS's "Introduction to NKI Kernel Optimization", re-derived for the ruler.

Source: aws-neuron/aws-neuron-sdk ``nki/guides/tutorials/kernel-optimization.rst`` (page dated
2025-12-02; read at commit 81ce03ae). The page profiles four versions of ``lhsT.T @ rhs`` on one
Trn2 NeuronCore, fp32, ``lhsT`` [8192, 4096] (lhs [4096, 8192] transposed) and ``rhs`` [8192, 8192].
Each kernel below follows the page's loop structure, tile shapes, buffers, instruction sequence
and dtypes; the code is ours.

- ``v2_tiled``: both operand tiles loaded for every (m, n, k) step.
- ``v3_hoisted``: the stationary column of tiles loaded once per m, the moving one once per (m, n).
- ``v4_blocked``: M and N blocked 2 x 2 tiles; each block's tiles loaded once per block.
- ``v5_blocked_k``: M, N and K blocked (16, 2, 8 tiles by default); partial sums over K blocks
  added in SBUF by VectorE, results packed into [128, 1024] rows before the store.
"""

from __future__ import annotations

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl

# The guide's test shape: lhs [4096, 8192] x rhs [8192, 8192], fp32.
M, K, N = 4096, 8192, 8192


def _tiles():
    return nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax


@nki.jit
def v2_tiled(lhsT, rhs):
    k_dim, m_dim = lhsT.shape
    _, n_dim = rhs.shape
    tm, tk, tn = _tiles()
    result = nl.ndarray((m_dim, n_dim), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(m_dim // tm):
        for n in nl.affine_range(n_dim // tn):
            acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // tk):
                a = nl.ndarray((tk, tm), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * tk:(k + 1) * tk, m * tm:(m + 1) * tm])
                nisa.dma_copy(dst=b, src=rhs[k * tk:(k + 1) * tk, n * tn:(n + 1) * tn])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=result[m * tm:(m + 1) * tm, n * tn:(n + 1) * tn], src=res)
    return result


@nki.jit
def v3_hoisted(lhsT, rhs):
    k_dim, m_dim = lhsT.shape
    _, n_dim = rhs.shape
    tm, tk, tn = _tiles()
    result = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.hbm)
    for m in nl.affine_range(m_dim // tm):
        lhs_col = []
        for k in nl.affine_range(k_dim // tk):
            a = nl.ndarray((tk, tm), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * tk:(k + 1) * tk, m * tm:(m + 1) * tm])
            lhs_col.append(a)
        for n in nl.affine_range(n_dim // tn):
            rhs_col = []
            for k in nl.affine_range(k_dim // tk):
                b = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * tk:(k + 1) * tk, n * tn:(n + 1) * tn])
                rhs_col.append(b)
            acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // tk):
                nisa.nc_matmul(dst=acc, stationary=lhs_col[k], moving=rhs_col[k])
            res = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=result[m * tm:(m + 1) * tm, n * tn:(n + 1) * tn], src=res)
    return result


@nki.jit
def v4_blocked(lhsT, rhs):
    k_dim, m_dim = lhsT.shape
    _, n_dim = rhs.shape
    tm, tk, tn = _tiles()
    per_m, per_n = 2, 2  # tiles per block
    bm, bn = tm * per_m, tn * per_n
    result = nl.ndarray((m_dim, n_dim), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(m_dim // bm):
        lhs_block = []
        for i in nl.affine_range(per_m):
            column = []
            for k in nl.affine_range(k_dim // tk):
                a = nl.ndarray((tk, tm), dtype=lhsT.dtype, buffer=nl.sbuf)
                col0 = (m * per_m + i) * tm
                nisa.dma_copy(dst=a, src=lhsT[k * tk:(k + 1) * tk, col0:col0 + tm])
                column.append(a)
            lhs_block.append(column)
        for n in nl.affine_range(n_dim // bn):
            rhs_block = []
            for j in nl.affine_range(per_n):
                column = []
                for k in nl.affine_range(k_dim // tk):
                    b = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                    col0 = (n * per_n + j) * tn
                    nisa.dma_copy(dst=b, src=rhs[k * tk:(k + 1) * tk, col0:col0 + tn])
                    column.append(b)
                rhs_block.append(column)
            for i in nl.affine_range(per_m):
                for j in nl.affine_range(per_n):
                    acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_dim // tk):
                        nisa.nc_matmul(dst=acc, stationary=lhs_block[i][k], moving=rhs_block[j][k])
                    res = nl.ndarray(acc.shape, dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=acc)
                    row0, col0 = (m * per_m + i) * tm, (n * per_n + j) * tn
                    nisa.dma_copy(dst=result[row0:row0 + tm, col0:col0 + tn], src=res)
    return result


@nki.jit
def v5_blocked_k(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    k_dim, m_dim = lhsT.shape
    _, n_dim = rhs.shape
    tm, tk, tn = _tiles()
    per_m, per_n, per_k = TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K
    bm, bn, bk = tm * per_m, tn * per_n, tk * per_k
    assert m_dim % bm == 0 and n_dim % bn == 0 and k_dim % bk == 0
    result = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.hbm)
    blocks_m, blocks_n, blocks_k = m_dim // bm, n_dim // bn, k_dim // bk
    for n in nl.affine_range(blocks_n):
        # SBUF partial sums of the whole [M, bn] column of results, zeroed first.
        sums = []
        for _ in range(blocks_m):
            rows = []
            for _ in range(per_m):
                cols = []
                for _ in range(per_n):
                    t = nl.ndarray((tm, tn), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.memset(dst=t, value=0.0)
                    cols.append(t)
                rows.append(cols)
            sums.append(rows)
        for kb in nl.sequential_range(blocks_k):
            rhs_rows = []
            for r in range(per_k):
                b = nl.ndarray((tk, bn), dtype=rhs.dtype, buffer=nl.sbuf)
                row0 = (per_k * kb + r) * tk
                nisa.dma_copy(dst=b[0:tk, 0:bn], src=rhs[row0:row0 + tk, bn * n:bn * (n + 1)])
                rhs_rows.append(b)
            for m in nl.affine_range(blocks_m):
                lhs_rows = []
                for r in nl.affine_range(per_k):
                    a = nl.ndarray((tk, bm), dtype=lhsT.dtype, buffer=nl.sbuf)
                    row0 = (per_k * kb + r) * tk
                    nisa.dma_copy(dst=a[0:tk, 0:bm], src=lhsT[row0:row0 + tk, bm * m:bm * (m + 1)])
                    lhs_rows.append(a)
                for j in nl.affine_range(per_n):
                    for i in nl.affine_range(per_m):
                        acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
                        for r in nl.affine_range(per_k):
                            nisa.nc_matmul(dst=acc,
                                           stationary=lhs_rows[r][0:tk, i * tm:(i + 1) * tm],
                                           moving=rhs_rows[r][0:tk, j * tn:(j + 1) * tn])
                        nisa.tensor_tensor(dst=sums[m][i][j], data1=sums[m][i][j], data2=acc, op=nl.add)
        for m in nl.affine_range(blocks_m):
            for i in nl.affine_range(per_m):
                packed = nl.ndarray((tm, bn), dtype=nl.float32, buffer=nl.sbuf)
                for j in nl.affine_range(per_n):
                    nisa.tensor_copy(dst=packed[0:tm, j * tn:(j + 1) * tn], src=sums[m][i][j][0:tm, 0:tn])
                row0 = (per_m * m + i) * tm
                nisa.dma_copy(dst=result[row0:row0 + tm, bn * n:bn * (n + 1)], src=packed[0:tm, 0:bn])
    return result


VERSIONS = {"v2": v2_tiled, "v3": v3_hoisted, "v4": v4_blocked, "v5": v5_blocked_k}
