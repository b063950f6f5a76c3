"""Two NKI kernels, written for the NKI 0.6 API as they would run on a Trainium.

- ``rmsnorm(x, gamma)``: x / sqrt(mean(x^2) + eps) * gamma over the last dim of [N, D], one
  128-row tile at a time: the squares and their row sum in one ScalarE activation, mean + eps on
  VectorE, rsqrt on ScalarE, and x * rstd * gamma in one VectorE instruction.
- ``matmul(lhsT, rhs)``: [M, N] = lhsT.T @ rhs with the stationary operand of an M block loaded
  once and reused for every N block, and [128, 512] output tiles accumulated over K in PSUM.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def rmsnorm(x, gamma, eps=1e-6):
    rows, cols = x.shape
    p = nl.tile_size.pmax
    assert rows % p == 0 and gamma.shape == (cols,)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, cols)).broadcast_to((p, cols)))
    for i in nl.affine_range(rows // p):
        t = nl.load(x[i * p : (i + 1) * p, :])
        squares = nl.ndarray((p, cols), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=t, reduce_op=nl.add, reduce_res=total,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        rstd = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=total, op0=nl.multiply, operand0=1.0 / cols,
                           op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        o = nl.ndarray((p, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=o, data=t, op0=nl.multiply, operand0=rstd, op1=nl.multiply, operand1=g)
        nl.store(out[i * p : (i + 1) * p, :], o)
    return out


@nki.jit
def matmul(lhsT, rhs, block_m=2):
    K, M = lhsT.shape
    K2, N = rhs.shape
    tm, tk, tn = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    assert K == K2 and K % tk == 0 and M % (tm * block_m) == 0 and N % tn == 0
    bm = tm * block_m
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // bm):
        stationary = []
        for k in nl.affine_range(K // tk):  # the M block's stationary operand, all of K, loaded once
            t = nl.ndarray((tk, bm), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=lhsT[k * tk : (k + 1) * tk, mb * bm : (mb + 1) * bm])
            stationary.append(t)
        for n in nl.affine_range(N // tn):
            moving = []
            for k in nl.affine_range(K // tk):
                t = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
                moving.append(t)
            for i in nl.affine_range(block_m):
                acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // tk):
                    nisa.nc_matmul(dst=acc, stationary=stationary[k][:, i * tm : (i + 1) * tm],
                                   moving=moving[k])
                res = nl.ndarray((tm, tn), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                m0 = mb * bm + i * tm
                nisa.dma_copy(dst=out[m0 : m0 + tm, n * tn : (n + 1) * tn], src=res)
    return out
