"""Fused single-head attention forward, ``softmax(q k^T / sqrt(d)) v`` (NKI fused attention tutorial).

``q_t`` and ``k_t`` arrive transposed ([d, S], the layout TensorE contracts over) and ``v`` as
[S, d]. K^T and V stay in SBUF for the whole kernel. For each block of 128 queries:

1. scores [128, S] = q^T k in [128, 512] PSUM chunks (TensorE), evicted with the 1/sqrt(d) scale
   on ScalarE; an optional causal mask is one GpSimd ``affine_select``;
2. the row max (VectorE), ``exp(s - max)`` and its row sum in one ScalarE instruction;
3. out [128, d] = P @ V accumulated over the 128-key tiles in one PSUM bank: each P tile is
   transposed on TensorE (P^T is the stationary operand), then multiplied by the V tile;
4. the 1/sum normalization while evicting PSUM (VectorE), and the store.

The scores never leave the chip. Simulated (S = 1024, d = 128, bfloat16 operands, fp32 softmax;
``python examples/nki/attention.py``):

- trn2: 49.12 us — TensorE busy 31%, VectorE 29%, ScalarE 29%, DMA 43%, MFU 13.9%
- trn3: 46.69 us — TensorE busy 32%, VectorE 25%, ScalarE 30%, DMA 45%, MFU 14.6%
"""

from __future__ import annotations

import math

import numpy as np

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl


@nki.jit
def attention_fwd(q_t, k_t, v, causal=False):
    """softmax(q k^T / sqrt(d)) v for q_t, k_t [d, S] and v [S, d] (d <= 128, S a multiple of 512)."""
    d, seq = q_t.shape
    p = nl.tile_size.pmax
    chunk = nl.tile_size.psum_bank_fmax  # 512 fp32 scores per PSUM bank
    assert k_t.shape == (d, seq) and v.shape == (seq, d) and d <= p and seq % chunk == 0
    scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((seq, d), dtype=v.dtype, buffer=nl.shared_hbm)

    kt = nl.load(k_t)  # [d, S], resident
    v_tiles = []
    for j in nl.affine_range(seq // p):
        v_tiles.append(nl.load(v[j * p : (j + 1) * p, :]))

    for i in nl.affine_range(seq // p):
        qt = nl.load(q_t[:, i * p : (i + 1) * p])  # [d, 128]: the stationary operand
        scores = nl.ndarray((p, seq), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(seq // chunk):
            s_psum = nl.ndarray((p, chunk), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_psum, stationary=qt, moving=kt[:, c * chunk : (c + 1) * chunk])
            nisa.activation(dst=scores[:, c * chunk : (c + 1) * chunk], op=nl.copy, data=s_psum, scale=scale)
        if causal:  # keep key k for query q = i*128 + partition when q - k >= 0
            nisa.affine_select(
                dst=scores,
                pattern=[[-1, seq]],
                channel_multiplier=1,
                on_true_tile=scores,
                on_false_value=nl.fp32.min,
                cmp_op=nl.greater_equal,
                offset=i * p,
            )

        neg_max = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=scores, axis=1, negate=True)
        probs = nl.ndarray((p, seq), dtype=v.dtype, buffer=nl.sbuf)
        total = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=probs,
            op=nl.exp,
            data=scores,
            bias=neg_max,
            reduce_op=nl.add,
            reduce_res=total,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        nisa.reciprocal(dst=total, data=total)

        o_psum = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(seq // p):
            pt_psum = nl.ndarray((p, p), dtype=probs.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=pt_psum, data=probs[:, j * p : (j + 1) * p], engine=nisa.engine.tensor)
            pt = nl.ndarray((p, p), dtype=probs.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pt, src=pt_psum)
            nisa.nc_matmul(dst=o_psum, stationary=pt, moving=v_tiles[j])
        o = nl.ndarray((p, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=o_psum, op0=nl.multiply, operand0=total)
        nl.store(out[i * p : (i + 1) * p, :], o)
    return out


def reference(q_t, k_t, v, causal=False):
    q, k, v = q_t.astype(np.float32).T, k_t.astype(np.float32).T, v.astype(np.float32)
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


def inputs(seq=1024, d=128, dtype=None, seed=0):
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if dtype is None else dtype
    rng = np.random.default_rng(seed)
    q_t, k_t = (rng.standard_normal((d, seq), dtype=np.float32).astype(dtype) for _ in range(2))
    v = rng.standard_normal((seq, d), dtype=np.float32).astype(dtype)
    return q_t, k_t, v


def main() -> None:
    from _common import report

    q_t, k_t, v = inputs()
    report("attention_fwd S=1024 d=128 bf16", attention_fwd, (q_t, k_t, v), reference(q_t, k_t, v))


if __name__ == "__main__":
    main()
