"""The host arrays behind SBUF and PSUM: row layout the executors' fast paths rely on."""

import numpy as np
import pytest

from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Memory, Program, TensorDecl
from neuronsim.sim.memory.layout import Placement
from neuronsim.sim.memory.state import CoreMemory, core_memory, host_pitch


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


def test_a_later_phase_keeps_the_bytes_of_tiles_live_across_its_barrier():
    """A tile first used after a barrier is filled as new memory, but not where it shares bytes with
    a tile kept from the phase before (nki-library's moe_tkg read NaN through such a fill)."""
    spec = get_chip("trn2")
    mem = CoreMemory(spec)
    kept = TensorDecl(0, "kept", Memory.SBUF, (128, 4), DType.float32, address=(0, 0))
    new = TensorDecl(1, "new", Memory.SBUF, (128, 8), DType.float32, address=(0, 0))
    program = Program("phase1", (kept, new), ())
    placement = Placement((0, 0), (0, 0), 0, 0)
    mem.sbuf[:, :32] = 7
    mem.reset(program, placement, "nan", keep=frozenset({"kept"}))
    assert (mem.sbuf[:, :16] == 7).all() and (mem.sbuf[:, 16:32] == 0xFF).all()
    mem.reset(program, placement, "nan")
    assert (mem.sbuf[:, :32] == 0xFF).all()
