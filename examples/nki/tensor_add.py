"""Element-wise addition of two [N, F] tensors, tile by tile (the "getting started" NKI kernel).

Each [128, 2048] tile pair is loaded with one DMA each, added on VectorE and stored; the
``affine_range`` iterations are independent, so their tiles rotate over several SBUF buffers and
the loads of one tile overlap the add and the store of the previous one. The kernel is DMA-bound.

Simulated (1024 x 4096 float32; ``python examples/nki/tensor_add.py``):

- trn2: 162.30 us — DMA busy 84%, VectorE 42%
- trn3: 120.15 us — DMA busy 79%, VectorE 45%
"""

from __future__ import annotations

import numpy as np

import neuronsim.nki as nki
import neuronsim.nki.language as nl


@nki.jit
def tensor_add(a, b):
    """``a + b`` for [N, F] HBM tensors with N a multiple of 128."""
    assert a.shape == b.shape and a.dtype == b.dtype
    rows, cols = a.shape
    tile_p = nl.tile_size.pmax
    tile_f = min(cols, 2048)
    assert rows % tile_p == 0 and cols % tile_f == 0
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // tile_p):
        for j in nl.affine_range(cols // tile_f):
            rs, cs = slice(i * tile_p, (i + 1) * tile_p), slice(j * tile_f, (j + 1) * tile_f)
            x = nl.load(a[rs, cs])
            y = nl.load(b[rs, cs])
            nl.store(out[rs, cs], nl.add(x, y))
    return out


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32) + b.astype(np.float32)).astype(a.dtype)


def main() -> None:
    from _common import report

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 4096), dtype=np.float32)
    b = rng.standard_normal((1024, 4096), dtype=np.float32)
    report("tensor_add 1024x4096 fp32", tensor_add, (a, b), reference(a, b))


if __name__ == "__main__":
    main()
