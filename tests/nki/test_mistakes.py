"""Kernel mistakes (issue 18's list): each gets its documented error class and the kernel's relative
``file:line``, found before any simulation work; the caller's arrays are left as they were."""

import inspect
import os

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError, InputError, NeuronSimError, OutOfBoundsError

A = np.ones((128, 64), np.float32)


def _line(fn, marker: str) -> str:
    """``test_mistakes.py:N`` of the line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    n = next(i for i, text in enumerate(lines) if marker in text)
    return f"test_mistakes.py:{start + n}"


def _check(err: NeuronSimError, cls, location: str):
    assert type(err) is cls or isinstance(err, cls)
    assert err.location is not None and not os.path.isabs(err.location)
    assert err.location.endswith(location), (err.location, location)
    assert str(err).startswith(err.location)


def test_program_id_beyond_the_grid():
    @nki.jit
    def k(a):
        nl.program_id(1)  # <- axis 1 of a 1-d grid
        return a

    with pytest.raises(OutOfBoundsError) as e:
        nki.simulate(k[2])(A)
    _check(e.value, OutOfBoundsError, _line(k.fn, "# <- axis"))


def test_add_of_tiles_that_do_not_broadcast():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))  # <- 64 vs 32
        return out

    with pytest.raises(ConstraintError) as e:
        nki.simulate(k)(A, np.ones((128, 32), np.float32))
    _check(e.value, ConstraintError, _line(k.fn, "# <- 64 vs 32"))


@nki.jit  # <- def (a function's first line is its first decorator's)
def _copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


@pytest.mark.parametrize("args", [(), (A, A), ([1.0, 2.0],), ("abc",)], ids=["none", "two", "list", "str"])
def test_wrong_arguments_are_input_errors(args):
    with pytest.raises(InputError) as e:
        nki.simulate(_copy)(*args)
    where = _line(_copy.fn, "# <- def") if len(args) != 1 else _line(_copy.fn, "nl.ndarray(a.shape")
    _check(e.value, InputError, where)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_64_bit_inputs_and_tiles(dtype):
    with pytest.raises(DtypeError) as e:
        nki.simulate(_copy)(np.ones((128, 4), dtype))
    _check(e.value, DtypeError, _line(_copy.fn, "# <- def"))

    @nki.jit
    def k(a):
        nl.ndarray((128, 4), dtype=dtype, buffer=nl.sbuf)  # <- 64-bit tile
        return a

    with pytest.raises(DtypeError) as e:
        nki.simulate(k)(A)
    _check(e.value, DtypeError, _line(k.fn, "# <- 64-bit tile"))


def test_storing_into_a_read_only_input_fails_before_running_and_leaves_it_unchanged():
    @nki.jit
    def k(a):
        nl.store(a, nl.add(nl.load(a), 1.0))  # <- writes its input
        return a

    ro = np.zeros((128, 64), np.float32)
    ro.flags.writeable = False
    with pytest.raises(InputError) as e:
        nki.simulate(k)(ro)
    _check(e.value, InputError, _line(k.fn, "# <- writes its input"))
    assert not ro.any()


def test_a_failing_launch_leaves_written_arguments_as_they_were():
    @nki.jit
    def k(a):
        nl.store(a, nl.add(nl.load(a), 1.0))
        nisa.core_barrier(a, (0, 1))
        nl.store(a, nl.add(nl.load(a), 1.0))
        return a

    a = np.zeros((128, 64), np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(a), a)  # returned input is the written copy...
    assert (a == 2).all()  # ...written back in place once every phase ran


def test_returning_an_sbuf_tile_points_at_the_return():
    @nki.jit
    def k(a):
        t = nl.load(a)
        return t  # <- return

    with pytest.raises(ConstraintError) as e:
        nki.simulate(k)(A)
    _check(e.value, ConstraintError, _line(k.fn, "# <- return"))


def test_a_zero_size_input():
    with pytest.raises(InputError) as e:
        nki.simulate(_copy)(np.ones((0, 4), np.float32))
    _check(e.value, InputError, _line(_copy.fn, "# <- def"))
    assert "no elements" in str(e.value)


def test_a_kernel_returning_none_that_writes_nothing():
    @nki.jit
    def k(a):
        nl.load(a)
        return None  # <- nothing

    with pytest.raises(ConstraintError) as e:
        nki.simulate(k)(A)
    _check(e.value, ConstraintError, _line(k.fn, "# <- nothing"))


def test_nisa_outside_a_kernel():
    def caller():
        nisa.memset(None, 0.0)  # <- outside

    with pytest.raises(ConstraintError) as e:
        caller()
    _check(e.value, ConstraintError, _line(caller, "# <- outside"))


def test_nisa_messages_name_the_call_once():
    @nki.jit
    def k(a):
        s = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m)  # <- too wide
        return a

    with pytest.raises(ConstraintError) as e:
        nki.simulate(k)(A)
    _check(e.value, ConstraintError, _line(k.fn, "# <- too wide"))
    assert str(e.value).count("nisa.nc_matmul") == 1 and e.value.instruction == "nisa.nc_matmul"
