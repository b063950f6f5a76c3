"""VectorE top-8 (sim/engines/vector_top_k.py): max8 and nc_find_index8 — values on both executors,
the documented cost formula (S23) and every check."""

import numpy as np
import pytest
from reduce_cases import EXECUTORS, OneOp, cycles, registered_opcodes, rejects, run_one

from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.sim import Opcode, ProgramBuilder
from neuronsim.sim.engines import vector_top_k

# ---------------------------------------------------------------- max8 / nc_find_index8

@pytest.mark.parametrize("executor", EXECUTORS)
def test_max8_descending_with_ties_and_nan(executor):
    """S16: the 8 largest per partition, descending. Assumed: NaN ranks first; ties keep input
    order (so -0.0 read before 0.0 comes out first)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((32, 40)).astype(np.float32)
    x[1, :12] = 5.0  # duplicates fill the top 8
    x[2, 3], x[2, 30] = np.nan, np.inf
    x[3] = -1.0
    x[3, 5], x[3, 9] = -0.0, 0.0
    out = run_one(Opcode.MAX8, (32, 8), "float32", [x], executor)
    plain = [p for p in range(32) if p not in (2,)]
    assert np.array_equal(out[plain], -np.sort(-x[plain], axis=1)[:, :8])
    assert np.isnan(out[2, 0]) and out[2, 1] == np.inf
    assert np.signbit(out[3, 0]) and not np.signbit(out[3, 1])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_max8_then_find_index8(executor):
    """nc_find_index8: the first index of each value (S16); absent values give the dtype's max."""
    x = np.random.default_rng(7).permutation(64).astype(np.float32).reshape(2, 32)
    x[0, 20] = x[0, 2] = 100.0  # duplicate maximum: first occurrence wins
    k = OneOp()
    src = k.load("x", x)
    top = k.result("top", (2, 8))
    idx32 = k.result("idx32", (2, 8), "uint32")
    missing = k.load("missing", np.full((2, 8), -5.0, np.float32))
    idx16 = k.result("idx16", (2, 8), "uint16")
    k.emit(Opcode.MAX8, top, [src])
    k.emit(Opcode.NC_FIND_INDEX8, idx32, [src, top])
    k.emit(Opcode.NC_FIND_INDEX8, idx16, [src, missing])
    out = k.run(executor)
    for p in range(2):
        want = [int(np.flatnonzero(x[p] == v)[0]) for v in out["top"][p]]
        assert list(out["idx32"][p]) == want
    assert list(out["idx32"][0][:2]) == [2, 2]
    assert np.all(out["idx16"] == 65535)


def test_top_k_costs_and_checks():
    """S23: max8 and nc_find_index8 cost N; they read 8 to 16,384 elements per partition."""
    b = ProgramBuilder()
    x, v = b.sbuf("x", (128, 1000), "float32"), b.sbuf("v", (128, 8), "float32")
    i = b.sbuf("i", (128, 8), "uint32")
    assert cycles(b.emit(Opcode.MAX8, v, [x])) == 1000
    assert cycles(b.emit(Opcode.NC_FIND_INDEX8, i, [x, v])) == 1000

    def short(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 8)), [k.load("x", np.zeros((4, 7), np.float32))])
    rejects(short, ConstraintError, "7 elements per partition; max8 reads 8 to 16384")

    def wide_dst(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 16)), [k.load("x", np.zeros((4, 32), np.float32))])
    rejects(wide_dst, ConstraintError, "dst is 4x16.*must be 4x8")

    def float_index(k):
        x = k.load("x", np.zeros((4, 32), np.float32))
        k.emit(Opcode.NC_FIND_INDEX8, k.result("i", (4, 8)), [x, k.load("v", np.zeros((4, 8), np.float32))])
    rejects(float_index, DtypeError, "dst dtype float32 is not allowed.*uint16.*uint32")

    def vals_shape(k):
        x = k.load("x", np.zeros((4, 32), np.float32))
        v = k.load("v", np.zeros((4, 4), np.float32))
        k.emit(Opcode.NC_FIND_INDEX8, k.result("i", (4, 8), "uint32"), [x, v])
    rejects(vals_shape, ConstraintError, "vals is 4x4.*must be 4x8")

# ---------------------------------------------------------------- nc_match_replace8

@pytest.mark.parametrize("executor", EXECUTORS)
def test_match_replace8_doc_example_and_duplicates(executor):
    """S16's example: data [1, 2, 3, 4, 8 x7], vals [3, 8 x7] -> dst_idx [2, 10, 9, 8, 7, 6, 5, 4]
    (vals taken in reverse order); matched elements become imm; an absent value leaves data alone and
    gives the dtype's maximum (assumed, as nc_find_index8)."""
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8, 0], [5, 6, 7, 9, 9, 1, 1, 1, 1, 1, 1, 2]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8], [9, 9, 9, 2, -4, 1, 1, 1]], np.float32)
    k = OneOp()
    d, v = k.load("d", data), k.load("v", vals)
    out, idx = k.result("out", (2, 12)), k.result("idx", (2, 8), "uint32")
    k.emit(Opcode.NC_MATCH_REPLACE8, out, [d, v], dst2=idx, imm=-np.inf)
    got = k.run(executor)
    assert list(got["idx"][0]) == [2, 10, 9, 8, 7, 6, 5, 4]
    miss = 2**32 - 1
    assert list(got["idx"][1]) == [miss, 4, 3, 11, miss, 7, 6, 5]
    want = data.copy()
    want[0, 2:11] = -np.inf
    want[0, 3] = 4
    want[1, [3, 4, 5, 6, 7, 11]] = -np.inf
    assert np.array_equal(got["out"], want)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_max8_then_match_replace8_in_place_is_a_top_k_fold(executor):
    """rotational_topk's fold: max8 then match_replace8 in place with -inf, twice, gives the top 16."""
    x = np.random.default_rng(9).permutation(128 * 64).astype(np.float32).reshape(128, 64)
    k = OneOp()
    data = k.load("x", x)
    top, idx = k.result("top", (128, 16)), k.result("idx", (128, 16), "uint16")
    for fold in range(2):
        cols = top.ap([[16, 128], [1, 8]], offset=8 * fold)
        k.emit(Opcode.MAX8, cols, [data])
        idx_cols = idx.ap([[16, 128], [1, 8]], offset=8 * fold)
        k.emit(Opcode.NC_MATCH_REPLACE8, data, [data, cols], dst2=idx_cols, imm=-np.inf)
    got = k.run(executor)
    order = np.argsort(-x, axis=1)[:, :16]
    assert np.array_equal(got["idx"], order)
    assert np.array_equal(got["top"], np.take_along_axis(x, order, axis=1))


def test_match_replace8_cost_and_checks():
    """S23: max(MIN_II, N); data 8..16384 per partition, vals [P, 8], dst like data, dst_idx uint16/32."""
    b = ProgramBuilder()
    x, v = b.sbuf("x", (128, 1000), "float32"), b.sbuf("v", (128, 8), "float32")
    assert cycles(b.emit(Opcode.NC_MATCH_REPLACE8, x, [x, v], imm=0.0)) == 1000
    small = b.sbuf("small", (128, 16), "float32")
    assert cycles(b.emit(Opcode.NC_MATCH_REPLACE8, small, [small, v], imm=0.0)) == 64

    def emit(k, dst_shape=(4, 32), idx=("uint32", (4, 8))):
        x = k.load("x", np.zeros((4, 32), np.float32))
        v = k.load("v", np.zeros((4, 8), np.float32))
        dst_idx = None if idx is None else k.result("i", idx[1], idx[0])
        k.emit(Opcode.NC_MATCH_REPLACE8, k.result("y", dst_shape), [x, v], dst2=dst_idx, imm=1.0)
    rejects(lambda k: emit(k, dst_shape=(4, 16)), ConstraintError, "dst is 4x16.*data is 4x32")
    rejects(lambda k: emit(k, idx=("float32", (4, 8))), DtypeError, "dst_idx dtype float32")
    rejects(lambda k: emit(k, idx=("uint32", (4, 4))), ConstraintError, "dst_idx is 4x4")


def test_every_opcode_of_this_file_is_registered():
    assert registered_opcodes(vector_top_k) == {Opcode.MAX8, Opcode.NC_FIND_INDEX8, Opcode.NC_MATCH_REPLACE8}


def test_unknown_immediates_are_rejected():
    def stray(k):
        k.emit(Opcode.MAX8, k.result("v", (4, 8)), [k.load("x", np.zeros((4, 32), np.float32))], k=8)
    rejects(stray, ConstraintError, r"unknown immediates \['k'\]")
