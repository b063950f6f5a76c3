"""Tracing: tracer tensors, indexing into access patterns, source lines, unrolled loops, the cache."""

import inspect

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, OutOfBoundsError
from neuronsim.sim.ir import Memory, Opcode


def _program(kernel, *args, chip="trn2"):
    return kernel.specialize(args, chip=chip).instances[0].programs[0]


def _line_of(fn, text):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(src) if text in line)


@nki.jit
def copy_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128, :])  # load
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=t)  # store
    return out


def test_loops_unroll_and_each_call_is_one_instruction_with_the_kernel_line():
    a = np.arange(512 * 64, dtype=np.float32).reshape(512, 64)
    prog = _program(copy_rows, a)
    assert [ins.opcode for ins in prog.instructions] == [Opcode.DMA_COPY] * 8
    load, store = _line_of(copy_rows.fn, "# load"), _line_of(copy_rows.fn, "# store")
    assert prog.instructions[0].location.endswith(f"test_tracing.py:{load}")
    assert prog.instructions[1].location.endswith(f"test_tracing.py:{store}")
    assert np.array_equal(nki.simulate(copy_rows)(a), a)


def test_slices_become_access_patterns():
    a = np.zeros((512, 64), np.float32)
    ins = _program(copy_rows, a).instructions
    src = ins[2].srcs[0]  # rows 128..255 of a
    assert src.tensor.memory is Memory.HBM and src.offset == 128 * 64
    assert src.pattern == ((64, 128), (1, 64))
    dst = ins[0].dst  # the SBUF tile, whole
    assert dst.pattern == ((64, 128), (1, 64)) and dst.offset == 0


def _views(body):
    """Trace ``body(tile)`` on a [128, 4, 32] float32 SBUF tile; return the views it makes."""
    seen = []

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 4, 32), dtype=nl.float32, buffer=nl.sbuf)
        seen.extend(body(t))
        return a

    k.specialize((np.zeros((1, 1), np.float32),))
    return seen


def test_indexing_rules_on_chip():
    full, part, col, strided, fixed, ds, ap = _views(
        lambda t: [
            t,
            t[0:64],
            t[:, 1, :],
            t[:, :, ::2],
            t[3],
            t[:, nl.ds(1, 2), 4:8],
            t.ap([[128, 128], [1, 16]], offset=16),
        ]
    )
    assert full.ap_pattern() == ((128, 128), (32, 4), (1, 32)) and full.shape == (128, 4, 32)
    assert part.shape == (64, 4, 32) and part.offset == 0
    assert col.shape == (128, 32) and col.offset == 32 and col.ap_pattern() == ((128, 128), (1, 32))
    assert strided.ap_pattern() == ((128, 128), (32, 4), (2, 16))
    assert fixed.shape == (4, 32) and fixed.offset == 3 * 128 and fixed.partitions == 1
    assert fixed.ap_pattern() == ((128, 1), (32, 4), (1, 32))
    assert ds.shape == (128, 2, 4) and ds.offset == 32 + 4
    assert ap.shape == (128, 16) and ap.offset == 16


def test_reshape_broadcast_permute():
    r, b, p = _views(lambda t: [t.reshape((128, 128)), t[:, 0:1, :].broadcast(1, 4), t.permute((0, 2, 1))])
    assert r.ap_pattern() == ((128, 128), (1, 128))
    assert b.ap_pattern() == ((128, 128), (0, 4), (1, 32))
    assert p.ap_pattern() == ((128, 128), (1, 32), (32, 4))


@pytest.mark.parametrize(
    "body,error",
    [
        (lambda t: [t[0:200]], OutOfBoundsError),
        (lambda t: [t[:, 5]], OutOfBoundsError),
        (lambda t: [t[::2]], ConstraintError),
        (lambda t: [t.broadcast(0, 2)], ValueError),
    ],
)
def test_bad_indexing_raises_with_the_line(body, error):
    with pytest.raises(error) as info:
        _views(body)
    assert "test_tracing.py:" in str(info.value) or error is ValueError


def test_hbm_views_reshape_and_broadcast_over_partitions():
    @nki.jit
    def bcast(v):
        out = nl.ndarray((128, v.shape[0]), dtype=v.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(v.reshape((1, v.shape[0])).broadcast_to((128, v.shape[0]))))
        return out

    v = np.arange(16, dtype=np.float32)
    assert np.array_equal(nki.simulate(bcast)(v), np.broadcast_to(v, (128, 16)))


def test_tensor_metadata_is_trace_time_python():
    info = {}

    @nki.jit
    def k(a):
        info.update(shape=a.shape, dtype=a.dtype, buffer=a.buffer, ndim=a.ndim)
        t = nl.ndarray((128, 8), dtype=nl.bfloat16, buffer=nl.psum)
        info.update(tdtype=t.dtype, tbuf=t.buffer)
        return a

    k.specialize((np.zeros((4, 8), np.float32),))
    assert info["shape"] == (4, 8) and info["dtype"] == nl.float32 and info["dtype"] == np.float32
    assert info["ndim"] == 2 and info["tdtype"] == "bfloat16" and info["tbuf"] == nl.psum


def test_a_traced_signature_is_cached():
    @nki.jit
    def k(a, scale=2.0):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), scale))
        return out

    a = np.ones((128, 16), np.float32)
    assert np.all(nki.simulate(k)(a) == 2.0)
    assert k.traces == 1
    nki.simulate(k)(a + 1)  # same signature: no tracing
    k(a)  # calling the kernel simulates too
    assert k.traces == 1
    assert np.all(nki.simulate(k)(a, scale=3.0) == 3.0)  # a constant is part of the signature
    nki.simulate(k)(np.ones((128, 32), np.float32))  # so are shapes
    nki.simulate(k, chip="trn3")(a)  # and the chip
    assert k.traces == 4


def test_a_list_of_arrays_is_keyed_by_shapes_and_dtypes_not_values():
    @nki.jit
    def k(parts):
        out = nl.ndarray(parts[0].shape, dtype=parts[0].dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(parts[0]), nl.load(parts[1])))
        return out

    a, b = np.ones((128, 16), np.float32), np.full((128, 16), 2.0, np.float32)
    assert np.all(nki.simulate(k)([a, b]) == 3.0)
    assert np.all(nki.simulate(k)([a + 1, b * 4]) == 10.0)  # new values, same signature
    assert k.traces == 1
    nki.simulate(k)((a, b))  # a tuple is another signature, as are other shapes
    nki.simulate(k)([np.ones((128, 8), np.float32)] * 2)
    assert k.traces == 3


def test_a_kernel_called_from_a_kernel_is_inlined():
    @nki.jit
    def inner(t):
        return nl.exp(t)

    @nki.jit
    def outer(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, inner(nl.load(a)))
        return out

    a = np.linspace(-1, 1, 128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_allclose(nki.simulate(outer)(a), np.exp(a), rtol=1e-5)


def test_outside_a_kernel_the_api_says_so():
    with pytest.raises(ConstraintError, match="inside a kernel"):
        nl.ndarray((128, 4), nl.float32)
