"""GpSimd gathers (sim/engines/gpsimd_gather.py): nc_n_gather on both executors, its assumed cost
formula, the run-time index check and every static check."""

import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, OneOp, cycles, registered_opcodes, rejects

from neuronsim import sim
from neuronsim.errors import ConstraintError, DtypeError, OutOfBoundsError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import gpsimd_gather


@pytest.mark.parametrize("executor", EXECUTORS)
def test_n_gather_takes_flattened_elements_per_partition_bit_for_bit(executor):
    """S16: dst[p, k] = data[p, indices[p, k]], data's free dims flattened; repeats allowed."""
    rng = np.random.default_rng(5)
    data = rng.integers(-2**31, 2**31 - 1, (64, 4, 50), dtype=np.int64).astype(np.int32)
    idx = rng.integers(0, 200, (64, 30)).astype(np.uint32)
    idx[0, :3] = [199, 199, 0]
    k = OneOp()
    d, i = k.load("d", data), k.load("i", idx)
    out = k.result("out", (64, 30), "int32")
    k.emit(Opcode.NC_N_GATHER, out, [d, i])
    got = k.run(executor)["out"]
    assert np.array_equal(got, np.take_along_axis(data.reshape(64, 200), idx.astype(np.int64), axis=1))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_index_out_of_range_is_an_error_with_the_line(executor):
    k = OneOp()
    d = k.load("d", np.zeros((4, 16), np.float32))
    i = k.load("i", np.full((4, 2), 16, np.uint32))
    k.emit(Opcode.NC_N_GATHER, k.result("out", (4, 2)), [d, i])
    with pytest.raises(OutOfBoundsError, match=r"kernel.py:7: nc_n_gather.*outside 0\.\.15"):
        sim.run(k.build(), k.inputs, executor=executor)


def test_n_gather_cost_and_checks():
    """Assumed: ceil(N_data / 512) * GPSIMD_START + N_out; dst keeps data's dtype; uint32 indices."""
    b = ProgramBuilder()
    d, i = b.sbuf("d", (128, 1200), "float32"), b.sbuf("i", (128, 64), "uint32")
    out = b.sbuf("o", (128, 64), "float32")
    assert cycles(b.emit(Opcode.NC_N_GATHER, out, [d, i])) == 3 * CHIP.gpsimd_start_cycles + 64

    def emit(k, dst_dtype="float32", idx_dtype="uint32", dst_free=8):
        data = k.load("d", np.zeros((4, 32), np.float32))
        idx = k.load("i", np.zeros((4, 8), idx_dtype))
        k.emit(Opcode.NC_N_GATHER, k.result("y", (4, dst_free), dst_dtype), [data, idx])
    rejects(lambda k: emit(k, dst_dtype="bfloat16"), DtypeError, "dst is bfloat16 but data is float32")
    rejects(lambda k: emit(k, idx_dtype="int32"), DtypeError, "indices are int32; nc_n_gather takes uint32")
    rejects(lambda k: emit(k, dst_free=4), ConstraintError,
            "indices have 8 elements per partition but dst has 4")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(gpsimd_gather) == {Opcode.NC_N_GATHER}
