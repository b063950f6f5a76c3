"""Registers and loops on them in kernels (S16 ``nisa.register_*``, ``nl.dynamic_range``,
``nl.fori_loop``/``while_loop``, ``while reg:``), written as nki-library writes them
(dynamic_shapes/dynamic_elementwise_add, moe_cte's dynamic block loops)."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, UnsupportedError

P, F = 128, 64


@nki.jit
def add_first_tiles(a, b, n_tiles):
    """dynamic_elementwise_add's pattern: a register trip count, an SBUF row offset advanced by
    tensor_scalar and read by scalar_offset."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_tiles)
    n_reg = nisa.register_alloc()
    nisa.register_load(n_reg, n_sb)
    row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    for _ in nl.dynamic_range(0, n_reg, 1):
        ta = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=row, indirect_dim=0))
        nisa.dma_copy(dst=tb, src=b.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=row, indirect_dim=0))
        nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
        nisa.dma_copy(dst=out.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=row, indirect_dim=0),
                      src=ta)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=P)
    return out


def _inputs(tiles=3):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((tiles * P, F)).astype(np.float32)
    b = rng.standard_normal((tiles * P, F)).astype(np.float32)
    return a, b


@pytest.mark.parametrize("n", [0, 1, 3])
def test_dynamic_range_on_a_loaded_register(n):
    """The first n row tiles are a + b; the loop body is traced once and runs n times."""
    a, b = _inputs()
    out = nki.simulate(add_first_tiles)(a, b, np.array([[n]], np.int32))
    rows = n * P
    np.testing.assert_array_equal(out[:rows], a[:rows] + b[:rows])


def test_time_follows_the_trip_count():
    """DESIGN decision 4: each run's schedule is its own path's."""
    a, b = _inputs()
    times = []
    for n in (1, 2, 3):
        _, prof = nki.simulate(add_first_tiles, profile=True)(a, b, np.array([[n]], np.int32))
        times.append(prof.summary["total_time"])
    assert times[0] < times[1] < times[2]


@nki.jit
def count_with_while(flags):
    """moe_cte's `while reg:` loop: the register is reloaded from the next flag at the end of the body."""
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    flag = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=idx, value=0)
    nisa.dma_copy(dst=flag, src=flags[0:1, 0:1])
    reg = nisa.register_alloc(flag[0, 0])
    while reg:
        nisa.tensor_scalar(dst=idx, data=idx, op0=nl.add, operand0=1)
        nisa.dma_copy(dst=flag, src=flags.ap(pattern=[[1, 1], [1, 1]], offset=0, scalar_offset=idx,
                                             indirect_dim=1))
        nisa.register_load(reg, flag)
    nisa.dma_copy(dst=out, src=idx)
    return out


@pytest.mark.parametrize("first_zero", [0, 1, 5])
def test_while_register_loops_until_the_register_is_zero(first_zero):
    flags = np.ones((1, 8), np.int32)
    flags[0, first_zero] = 0
    assert nki.simulate(count_with_while)(flags)[0, 0] == first_zero


@nki.jit
def gather_with_fori(data, bound):
    """nl.fori_loop's documented example: the induction register as a scalar_offset."""
    n = data.shape[1]
    out = nl.ndarray((1, n), dtype=data.dtype, buffer=nl.shared_hbm)
    ub = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ub, src=bound)
    ub_reg = nisa.register_alloc()
    nisa.register_load(ub_reg, ub)
    zeros = nl.ndarray((1, n), dtype=data.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    temp = nl.ndarray((1, 1), dtype=data.dtype, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=temp, src=data.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
        nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=temp)

    nl.fori_loop(0, ub_reg, body)
    return out


def test_fori_loop_with_a_register_bound_and_register_offsets():
    data = np.arange(1, 11, dtype=np.float32).reshape(1, 10)
    out = nki.simulate(gather_with_fori)(data, np.array([[4]], np.int32))
    np.testing.assert_array_equal(out, [[1, 2, 3, 4, 0, 0, 0, 0, 0, 0]])


@nki.jit
def countdown(count):
    """nl.while_loop's documented example: the body returns the next condition register."""
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    count_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count_sb, src=count)
    reg = nisa.register_alloc()
    nisa.register_load(reg, count_sb)

    def body(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=2.5)
        nisa.tensor_scalar(dst=count_sb, data=count_sb, op0=nl.subtract, operand0=1)
        nisa.register_load(r, count_sb)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_while_loop_runs_until_the_returned_register_is_zero():
    assert nki.simulate(countdown)(np.array([[3]], np.int32))[0, 0] == 7.5
    assert nki.simulate(countdown)(np.array([[0]], np.int32))[0, 0] == 0.0


@nki.jit
def move_and_store(x):
    out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    r = nisa.register_alloc(41)
    r2 = nisa.register_alloc()
    nisa.register_move(r2, r)
    nisa.register_store(t[0:1, 0:1], r)
    nisa.register_move(r, 7)
    nisa.register_store(t[0:1, 1:2], r)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_register_move_and_store():
    np.testing.assert_array_equal(nki.simulate(move_and_store)(np.zeros((1, 1), np.float32)), [[41, 7]])


@nki.jit
def if_on_register(x):
    r = nisa.register_alloc(1)
    if r:
        pass
    return x


@nki.jit
def break_out(x):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    r = nisa.register_alloc(3)
    for _ in nl.dynamic_range(r):
        break
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def float_register_load(x):
    r = nisa.register_alloc()
    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    nisa.register_load(r, t)
    return x


def test_misuse_points_at_the_kernel_line():
    x = np.zeros((1, 1), np.float32)
    with pytest.raises(TypeError, match="not of an `if`"):
        nki.simulate(if_on_register)(x)
    with pytest.raises(UnsupportedError, match="run to the end") as e:
        nki.simulate(break_out)(x)
    assert "test_registers.py:" in e.value.location
    with pytest.raises(ConstraintError, match="integer tensor") as e:
        nki.simulate(float_register_load)(x)
    assert e.value.location.startswith("test_registers.py:") or "test_registers.py:" in e.value.location
