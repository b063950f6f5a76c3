"""``nl.tile_size``: the hardware tile limits of the chip being traced for (or the configured chip)."""

from __future__ import annotations

import builtins

from neuronsim.nki.allocate import SBUF_ALIGN_BYTES
from neuronsim.nki.trace import active_trace
from neuronsim.options import current as current_options
from neuronsim.sim.chips import get_chip


def _chip():
    trace = active_trace()
    return trace.chip if trace is not None else get_chip(current_options().chip)


class _TileSizeMeta(type):
    pmax = property(lambda cls: _chip().partitions)
    psum_bank_fmax = property(lambda cls: _chip().psum_bank_bytes_per_partition // 4)
    psum_fmax = psum_bank_fmax  # deprecated alias (0.4): one bank of fp32
    psum_bank_fmax_bytes = property(lambda cls: _chip().psum_bank_bytes_per_partition)
    psum_fmax_bytes = psum_bank_fmax_bytes
    psum_num_banks = property(lambda cls: _chip().psum_banks)
    sbuf_size_bytes = property(lambda cls: _chip().partitions * _chip().sbuf_bytes_per_partition)
    sbuf_fmax = property(lambda cls: _chip().sbuf_bytes_per_partition // 4)
    sbuf_fmax_bytes = property(lambda cls: _chip().sbuf_bytes_per_partition)
    total_available_sbuf_size = property(lambda cls: _chip().sbuf_bytes_per_partition)
    gemm_stationary_fmax = property(lambda cls: _chip().matmul_stationary_free_max)
    # The portable moving tile is one PSUM bank of fp32 (trn3's nc_matmul accepts up to 8 banks).
    gemm_moving_fmax = property(
        lambda cls: builtins.min(_chip().matmul_moving_free_max, _chip().psum_bank_bytes_per_partition // 4)
    )
    bn_stats_fmax = property(lambda cls: _chip().bn_stats_free_max)
    psum_min_align = property(lambda cls: _chip().psum_bank_bytes_per_partition)
    sbuf_min_align = property(lambda cls: SBUF_ALIGN_BYTES)


class tile_size(metaclass=_TileSizeMeta):
    """Hardware tile size constants of the chip being traced for (``nl.tile_size.pmax`` ...)."""
