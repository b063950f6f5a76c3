"""Errors are typed (neuronsim.errors) and name the tile, its size, the limit and the kernel line."""

import inspect
import re

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import (
    ConstraintError,
    DtypeError,
    EngineAccessError,
    NeuronSimError,
    OutOfBoundsError,
    UnsupportedError,
)

A = np.zeros((128, 128), np.float32)


def _raise(body, error, chip="trn2"):
    """Trace a kernel running ``body()``; return the message of the ``error`` it raises."""

    @nki.jit
    def k(a):
        body()
        return a

    with pytest.raises(error) as info:
        k.specialize((A,), chip=chip)
    assert isinstance(info.value, NeuronSimError)
    return str(info.value)


def test_a_tile_with_more_than_128_partitions():
    def body():
        nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf, name="wide")  # <-

    msg = _raise(body, ConstraintError)
    line = inspect.getsourcelines(body)[1] + 1
    assert f"test_errors.py:{line}" in msg
    assert "'wide'" in msg and "256 partitions" in msg and "limit is 128" in msg


def test_a_matmul_moving_free_size_over_512():
    def body():
        a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf, name="stat")
        b = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf, name="mov")
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum, name="acc")
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)

    msg = _raise(body, ConstraintError)
    line = inspect.getsourcelines(body)[1] + 4
    assert f"test_errors.py:{line}" in msg and "nisa.nc_matmul" in msg
    assert "'mov'" in msg and "free size 1024" in msg and "limit on trn2 is 512" in msg


def test_tensor_engine_reading_psum():
    def body():
        a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum, name="in_psum")
        b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)

    msg = _raise(body, EngineAccessError)
    assert "TensorE reads its stationary operand from SBUF only" in msg and "'in_psum'" in msg
    assert re.search(r"test_errors.py:\d+", msg)


@pytest.mark.parametrize("case", ["gpsimd_psum", "dma_psum", "vector_hbm"])
def test_engines_reach_only_their_memories(case):
    def body():
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum, name="p")
        h = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm, name="h")
        if case == "gpsimd_psum":
            nisa.iota(dst=p, pattern=[[1, 64]])
        elif case == "dma_psum":
            nisa.dma_copy(dst=h, src=p)
        else:
            nisa.tensor_copy(dst=p, src=h)

    msg = _raise(body, EngineAccessError)
    assert {
        "gpsimd_psum": "gpsimd engine cannot write PSUM",
        "dma_psum": "DMA engines cannot access PSUM",
        "vector_hbm": "vector engine cannot read HBM",
    }[case] in msg


def test_shape_and_dtype_rules():
    def mismatch():
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)

    assert "data1 is 128x64" in _raise(mismatch, ConstraintError)

    def mixed():
        a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)

    assert "float32/tfloat32 operands pair only" in _raise(mixed, DtypeError)


def test_out_of_bounds_slices_and_unsupported_calls():
    def oob():
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t[:, 32:96], value=0.0)

    assert "out of range for dim 1 (size 64)" in _raise(oob, OutOfBoundsError)

    def unsupported():
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(t, t, nl.add, nl.add, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)

    assert "reduce_cmd=reduce continues VectorE's accumulator" in _raise(unsupported, UnsupportedError)


def test_outputs_must_be_hbm_tensors():
    @nki.jit
    def returns_tile(a):
        return nl.load(a)

    with pytest.raises(ConstraintError, match="kernel outputs must be HBM tensors"):
        returns_tile.specialize((A,))


def test_errors_keep_working_as_python_exceptions():
    assert issubclass(OutOfBoundsError, IndexError) and issubclass(ConstraintError, ValueError)
    assert issubclass(UnsupportedError, NotImplementedError)
