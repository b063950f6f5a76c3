"""Two-dimensional SBUF placement (nki/allocate.py): when tiles do not fit side by side in the bytes
of a partition, a tile of <= 64 partitions may start at partition 64 (<= 32: at 32, 64 or 96), as
nki-library's cross_entropy_forward needs for its two [64, 65535] bf16 chunks on hardware."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import SbufCapacityError

N = 30000  # 120,000 bytes per partition in float32: one tile fits a trn2 partition (212,984), two do not


@nki.jit
def exp_chunks(logits):
    """The cross-entropy pattern: a chunk of logits and its exp live together, plus row statistics."""
    parts, n = logits.shape
    exp_out = nl.ndarray((parts, n), dtype=nl.float32, buffer=nl.shared_hbm)
    prod_out = nl.ndarray((parts, n), dtype=nl.float32, buffer=nl.shared_hbm)
    sums_out = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    row_max = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
    row_sum = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
    chunk = nl.ndarray((parts, n), dtype=nl.float32, buffer=nl.sbuf, name="chunk")
    exp_chunk = nl.ndarray((parts, n), dtype=nl.float32, buffer=nl.sbuf, name="exp_chunk")
    nisa.dma_copy(dst=chunk, src=logits)
    nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=chunk, axis=1, negate=True)
    nisa.activation_reduce(dst=exp_chunk, op=nl.exp, data=chunk, bias=row_max, reduce_op=nl.add,
                           reduce_res=row_sum)
    nisa.tensor_tensor(dst=chunk, data1=chunk, data2=exp_chunk, op=nl.multiply)
    half = parts // 2  # a sub-range of the moved tile: its own start partition is offset too
    nisa.dma_copy(dst=exp_out[0:half, :], src=exp_chunk[0:half, :])
    nisa.dma_copy(dst=exp_out[half:parts, :], src=exp_chunk[half:parts, :])
    nisa.dma_copy(dst=prod_out, src=chunk)
    nisa.dma_copy(dst=sums_out, src=row_sum)
    return exp_out, prod_out, sums_out


def _tiles(kernel, *args, chip="trn2"):
    inst = kernel.specialize(args, chip=chip).instances[0]
    return {t.name: t for t in inst.programs[0].tensors}


def test_two_64_partition_tiles_too_big_for_one_partition_share_the_partitions():
    x = np.random.default_rng(1).uniform(-2, 2, (64, N)).astype(np.float32)
    tiles = _tiles(exp_chunks, x)
    chunk, exp_chunk = tiles["chunk"], tiles["exp_chunk"]
    assert chunk.bytes_per_partition + exp_chunk.bytes_per_partition > 212984
    assert {chunk.address[0], exp_chunk.address[0]} == {0, 64}

    exp_out, prod_out, sums = nki.simulate(exp_chunks)(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(exp_out, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(prod_out, x * e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sums[:, 0], e.sum(axis=1), rtol=1e-4)


def test_tiles_that_fit_one_partition_range_stay_at_partition_zero():
    x = np.zeros((64, N // 2), np.float32)
    assert all(t.address[0] == 0 for t in _tiles(exp_chunks, x).values() if t.address is not None)
    # trn3 partitions hold both chunks side by side
    on_trn3 = _tiles(exp_chunks, np.zeros((64, N), np.float32), chip="trn3")
    assert all(t.address[0] == 0 for t in on_trn3.values() if t.address is not None)


def test_32_partition_tiles_use_four_partition_quarters():
    @nki.jit
    def four(a):
        out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ts = [nl.ndarray((32, N), dtype=nl.float32, buffer=nl.sbuf, name=f"q{i}") for i in range(4)]
        for i, t in enumerate(ts):
            nisa.memset(dst=t, value=float(i + 1))
        acc = ts[0]
        for t in ts[1:]:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        total = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=acc, axis=1)
        nisa.dma_copy(dst=out, src=total)
        return out

    a = np.zeros((1, 1), np.float32)
    tiles = _tiles(four, a)
    assert sorted({tiles[f"q{i}"].address[0] for i in range(4)}) == [0, 32, 64, 96]
    np.testing.assert_array_equal(nki.simulate(four)(a)[:, 0], np.full(32, 10.0 * N))


def test_three_64_partition_tiles_in_one_instruction_still_overflow():
    @nki.jit
    def three(a):
        x = nl.ndarray((64, N), dtype=nl.float32, buffer=nl.sbuf, name="x")
        y = nl.ndarray((64, N), dtype=nl.float32, buffer=nl.sbuf, name="y")
        z = nl.ndarray((64, N), dtype=nl.float32, buffer=nl.sbuf, name="z")
        nisa.memset(dst=x, value=1.0)
        nisa.memset(dst=y, value=2.0)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        return a

    expected = r"test_allocation_2d.py:\d+.*120000 bytes per partition.*212984"
    with pytest.raises(SbufCapacityError, match=expected):
        three.specialize((np.zeros((1, 1), np.float32),))


def test_two_128_partition_tiles_still_overflow():
    @nki.jit
    def two(a):
        x = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf, name="x")
        y = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf, name="y")
        nisa.memset(dst=x, value=1.0)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)
        return a

    with pytest.raises(SbufCapacityError, match=r"test_allocation_2d.py:\d+.*'y'.*212984"):
        two.specialize((np.zeros((1, 1), np.float32),))
