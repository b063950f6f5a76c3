"""The load -> exp -> store kernel of AWS's "Introduction to Direct Memory Access (DMA) with NKI".

Source: aws-neuron/aws-neuron-sdk ``nki/get-started/about/nki-dma-overview.rst`` (read at commit
81ce03ae), examples 1 and 2, profiled on one Trn2 NeuronCore (figures ``nki-dma-intro-3.png``,
``-5.png``, ``-6.png``, ``-7.png``). The page runs the same three-instruction kernel on a bf16
[4, 4096] tensor (one DMA engine carries the data) and on a bf16 [128, 128] tensor (all 16 engines,
2 KiB each). The code is ours; shapes, dtypes, buffers and instructions are the page's.
"""

from __future__ import annotations

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl

SHAPES = {"4x4096": (4, 4096), "128x128": (128, 128)}


@nki.jit
def load_exp_store(in_tensor):
    rows, cols = in_tensor.shape
    out_tensor = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    loaded = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    result = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=loaded, src=in_tensor[0:rows, 0:cols])
    nisa.activation(dst=result, op=nl.exp, data=loaded)
    nisa.dma_copy(dst=out_tensor[0:rows, 0:cols], src=result)
    return out_tensor
