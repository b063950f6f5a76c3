"""GpSimd sequence_bounds (sim/engines/gpsimd_sequence.py) on both executors: the SDK's documented
example and numpy model, int32 and float32 ids and results, its assumed cost and every static check."""

import numpy as np
import pytest
from reduce_cases import CHIP, EXECUTORS, cycles, registered_opcodes, rejects, run_one

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import gpsimd_sequence


def sdk_model(ids: np.ndarray) -> np.ndarray:
    """The numpy equivalent in the SDK's test_nki_isa_sequence_bounds (starts, then exclusive ends)."""
    n = ids.size
    lo, hi = np.zeros(n), np.zeros(n)
    lo[0] = 0 if ids[0] != 0 else n
    for i in range(1, n):
        lo[i] = n if ids[i] == 0 else lo[i - 1] if ids[i] == ids[i - 1] else i
    hi[-1] = n if ids[-1] != 0 else -1
    for i in range(n - 2, -1, -1):
        hi[i] = -1 if ids[i] == 0 else hi[i + 1] if ids[i] == ids[i + 1] else i + 1
    return np.concatenate([lo, hi])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_documented_example(executor):
    """S16: [0, 1, 1, 2, 2, 2, 0, 3, 3] -> starts [9, 1, 1, 3, 3, 3, 9, 7, 7],
    ends [-1, 3, 3, 6, 6, 6, -1, 9, 9]."""
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    got = run_one(Opcode.SEQUENCE_BOUNDS, (1, 18), "int32", [ids], executor)
    assert list(got[0]) == [9, 1, 1, 3, 3, 3, 9, 7, 7, -1, 3, 3, 6, 6, 6, -1, 9, 9]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("src_dtype,dst_dtype",
                         [("float32", "float32"), ("float32", "int32"), ("int32", "float32")])
def test_random_runs_match_the_sdk_model(executor, src_dtype, dst_dtype):
    """Runs of equal ids (one coming back later starts a new run), padding 0 and -0.0 among them."""
    rng = np.random.default_rng(7)
    ids = np.repeat(rng.integers(0, 4, 30), rng.integers(1, 4, 30))[None, :64].astype(src_dtype)
    if src_dtype == "float32":
        ids[0, 5] = -0.0
    got = run_one(Opcode.SEQUENCE_BOUNDS, (1, 2 * ids.shape[1]), dst_dtype, [ids], executor)
    assert np.array_equal(got[0], sdk_model(ids[0]).astype(dst_dtype))


def test_cost_and_checks():
    """Assumed: GPSIMD_START + 2n; float32/int32 on one partition, dst holding 2n."""
    b = ProgramBuilder()
    s, d = b.sbuf("s", (1, 300), "int32"), b.sbuf("d", (1, 2, 300), "int32")
    assert cycles(b.emit(Opcode.SEQUENCE_BOUNDS, d, [s])) == CHIP.gpsimd_start_cycles + 600

    def emit(k, src="int32", dst="int32", parts=1, dst_free=16):
        x = k.load("s", np.zeros((parts, 8), src))
        k.emit(Opcode.SEQUENCE_BOUNDS, k.result("y", (parts, dst_free), dst), [x])
    rejects(lambda k: emit(k, src="float16"), DtypeError, "segment_ids is float16")
    rejects(lambda k: emit(k, dst="uint32"), DtypeError, "dst is uint32")
    rejects(lambda k: emit(k, parts=2), ConstraintError, "works on one partition")
    rejects(lambda k: emit(k, dst_free=8), ConstraintError, r"\[1, 2, 8\]")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(gpsimd_sequence) == {Opcode.SEQUENCE_BOUNDS}
