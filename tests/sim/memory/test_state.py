"""The host arrays behind SBUF and PSUM: row layout the executors' fast paths rely on."""

import numpy as np
import pytest

from neuronsim.sim.chips import get_chip
from neuronsim.sim.ir import Memory
from neuronsim.sim.memory.state import core_memory, host_pitch


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_rows_start_on_cache_lines_and_do_not_alias_in_l1(chip):
    """Every partition's row starts on a 64-byte line (vector loads never straddle two), and rows
    are never a multiple of 4 KiB apart (the same column of every partition would fall in the same
    L1 sets)."""
    spec = get_chip(chip)
    mem = core_memory(spec)
    for memory, view, nbytes in ((Memory.SBUF, mem.sbuf, spec.sbuf_bytes_per_partition),
                                 (Memory.PSUM, mem.psum, spec.psum_bytes_per_partition)):
        pitch = mem.pitch[memory]
        assert pitch == host_pitch(nbytes) and pitch >= nbytes and pitch % 64 == 0 and pitch % 4096
        assert view.shape == (spec.partitions, nbytes) and view.strides == (pitch, 1)
        starts = view.ctypes.data + pitch * np.arange(spec.partitions)
        assert (starts % 64 == 0).all()
