"""The published Trainium2 hardware figures the ruler compares the simulator against.

Every figure was read from a Neuron Explorer screenshot in aws-neuron/aws-neuron-sdk (commit
81ce03ae): the summary panes print values to 2 decimals (ms); timeline tooltips print durations in
ns; where a value had to be read off a timeline row, the bar's ends were located in the PNG pixel
by pixel and converted with the axis tick labels of the same image (the precision says how many
ns one pixel is).

``measure`` names what is taken from a simulated run (see ``run.py``):

- ``total``: the kernel's total time; ``dma_active`` / ``tensor_active`` / ``vector_active``:
  Explorer's active times (DMA: time with at least one DMA packet moving data; an engine: time
  with at least one of its instructions in flight).
- ``load_transfer``: the first DMA's transfer, first packet start to last packet end (Explorer's
  DMA row for the transfer); ``load_piece``: one DMA engine's busy time for it (the expanded
  per-engine row); ``load_trigger_to_done``: from the trigger instruction's start to the last
  packet's end (the pending-DMA count's rise and fall); ``store_*`` the same for the store.
- ``exp``: the ScalarE ``activation`` instruction; ``act_table_load``: the activation-table load
  ScalarE runs before it.
"""

from __future__ import annotations

from dataclasses import dataclass

GUIDE = "nki/guides/tutorials/kernel-optimization.rst"
DMA_PAGE = "nki/get-started/about/nki-dma-overview.rst"


@dataclass(frozen=True)
class Figure:
    kernel: str  # "v2".."v5" (optimization guide) or "dma_4x4096" / "dma_128x128" (DMA overview)
    measure: str
    hardware_ns: float
    page: str
    image: str
    read: str  # what was read and how precisely


_DMA3, _DMA5, _DMA6, _DMA7 = (f"nki/img/overviews/nki-dma-intro-{n}.png" for n in (3, 5, 6, 7))


def _ms(x: float) -> float:
    return x * 1e6


FIGURES: tuple[Figure, ...] = (
    # ---- Introduction to NKI Kernel Optimization: fp32 lhs [4096, 8192] x rhs [8192, 8192]
    Figure("v2", "total", 39_894_938, GUIDE, "nki/img/how-to/v2-full.png",
           "timeline axis ends at 39,894,938 ns ('39.89 ms'); exact"),
    Figure("v2", "dma_active", _ms(39.87), GUIDE, "nki/img/how-to/v2-dma.png",
           "summary 'Dma Active Time 39.87 ms' (99.93%); +-0.005 ms"),
    Figure("v2", "tensor_active", _ms(34.82), GUIDE, "nki/img/how-to/v2-pe.png",
           "summary 'Tensor Engine Active Time 34.82 ms' (87.28%); +-0.005 ms"),
    Figure("v3", "total", 28_197_982, GUIDE, "nki/img/how-to/v3-full.png",
           "timeline axis ends at 28,197,982 ns ('28.20 ms'); exact"),
    Figure("v3", "dma_active", _ms(28.12), GUIDE, "nki/img/how-to/v3-dma.png",
           "summary 'Dma Active Time 28.12 ms' (99.73%); +-0.005 ms"),
    Figure("v3", "tensor_active", _ms(28.16), GUIDE, "nki/img/how-to/v3-pe.png",
           "summary 'Tensor Engine Active Time 28.16 ms' (99.85%); +-0.005 ms"),
    Figure("v4", "total", 28_414_015, GUIDE, "nki/img/how-to/v4-full.png",
           "timeline axis ends at 28,414,015 ns ('28.41 ms'); exact"),
    Figure("v4", "dma_active", _ms(27.19), GUIDE, "nki/img/how-to/v4-dma.png",
           "summary 'Dma Active Time 27.19 ms' (95.70%); +-0.005 ms"),
    Figure("v4", "tensor_active", _ms(28.28), GUIDE, "nki/img/how-to/v4-pe.png",
           "summary 'Tensor Engine Active Time 28.28 ms' (99.52%); +-0.005 ms"),
    Figure("v5", "total", 28_301_971, GUIDE, "nki/img/how-to/v5-full.png",
           "timeline axis ends at 28,301,971 ns ('28.30 ms'); exact"),
    Figure("v5", "dma_active", _ms(6.10), GUIDE, "nki/img/how-to/v5-dma.png",
           "summary 'Dma Active Time 6.10 ms' (21.54%); +-0.005 ms"),
    Figure("v5", "tensor_active", _ms(28.16), GUIDE, "nki/img/how-to/v5-pe.png",
           "summary 'Tensor Engine Active Time 28.16 ms' (99.50%); +-0.005 ms"),
    Figure("v5", "vector_active", _ms(2.99), GUIDE, "nki/img/how-to/v5-vec.png",
           "summary 'Vector Engine Active Time 2.99 ms' (10.55%); +-0.005 ms"),
    # ---- Introduction to DMA with NKI: load -> exp -> store, bf16
    Figure("dma_4x4096", "load_transfer", 1416, DMA_PAGE, _DMA3,
           "tooltip of the load on DMA-E64: '23,283ns - 24,699ns, Duration: 1,416ns' (32 KiB, one engine); "
           "exact"),
    Figure("dma_4x4096", "load_trigger_to_done", 2435, DMA_PAGE, _DMA3,
           "pending-DMA count rises at 22,274 ns with the Sync trigger and falls at 24,709 ns; "
           "bar ends read in pixels, 2.33 ns/px, +-10 ns"),
    Figure("dma_4x4096", "act_table_load", 1332, DMA_PAGE, _DMA3,
           "first Scalar bar 25,012-26,344 ns; 2.33 ns/px, +-10 ns"),
    Figure("dma_4x4096", "exp", 3716, DMA_PAGE, _DMA3,
           "second Scalar bar 26,349-30,065 ns; 2.33 ns/px, +-10 ns"),
    Figure("dma_4x4096", "store_transfer", 1230, DMA_PAGE, _DMA3,
           "store bar on DMA-E64 30,987-32,217 ns; 2.33 ns/px, +-10 ns"),
    Figure("dma_4x4096", "store_trigger_to_done", 2130, DMA_PAGE, _DMA3,
           "pending-DMA count rises at 30,084 ns with the GpSimd trigger, falls at 32,214 ns; "
           "2.33 ns/px, +-10 ns"),
    Figure("dma_128x128", "load_transfer", 468, DMA_PAGE, _DMA7,
           "tooltip of the load on qGpSimdDynamic: '34,039 ns - 34,507 ns, Duration: 468 ns' "
           "(32 KiB over 16 engines); exact"),
    Figure("dma_128x128", "load_piece", 97, DMA_PAGE, _DMA5,
           "tooltip on DMA-E64: '34,051ns - 34,148ns, Duration: 97ns', 2 KiB; exact (the 16 pieces read "
           "in pixels are 85-105 ns, 1.11 ns/px)"),
    Figure("dma_128x128", "load_trigger_to_done", 1207, DMA_PAGE, _DMA6,
           "trigger DMA_DIRECT2D on GpSimd at 33,300 ns (tooltip, figure 6) to the transfer's end at "
           "34,507 ns (tooltip, figure 7); exact"),
    Figure("dma_128x128", "act_table_load", 1331, DMA_PAGE, _DMA5,
           "first Scalar bar 34,799-36,130 ns; 1.11 ns/px, +-5 ns"),
    Figure("dma_128x128", "exp", 404, DMA_PAGE, _DMA5,
           "second Scalar bar 36,136-36,540 ns; 1.11 ns/px, +-5 ns"),
    Figure("dma_128x128", "store_transfer", 243, DMA_PAGE, _DMA5,
           "the store's 16 pieces (86-89 ns each) span 38,033-38,276 ns; 1.11 ns/px, +-5 ns"),
    Figure("dma_128x128", "store_trigger_to_done", 861, DMA_PAGE, _DMA5,
           "pending-DMA count rises at 37,419 ns (GpSimd trigger) and falls at 38,280 ns; 1.11 ns/px, "
           "+-5 ns (figure 6 agrees: 863 ns at 4.67 ns/px)"),
)
