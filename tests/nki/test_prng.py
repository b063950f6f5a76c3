"""The PRNG through nki: nisa.set_rng_seed / rng / dropout and nl.random_seed / rand / dropout —
the stream each call draws, the documented seed semantics, and the trace-time checks."""

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError, EngineAccessError, UnsupportedError
from neuronsim.sim.engines.vector_rng import stream_bits, uniform_of
from neuronsim.sim.ir import Engine, Opcode

X = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)


def _seeded(body, seed: int | None = 1234, shape=(128, 64), dtype=nl.uint32, **kw):
    """A kernel: (seed from an HBM [1, 1] uint32), then ``body(*tiles) -> tile``, stored."""

    @nki.jit
    def k(seed_hbm, x_hbm):
        if seed is not None:
            s = nl.load(seed_hbm)
            nisa.set_rng_seed(s)
        res = body(nl.load(x_hbm), **kw)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    args = (np.array([[0 if seed is None else seed]], np.uint32), X)
    return nki.simulate(k)(*args), k.specialize(args).instances[0].programs[0]


def _two_rngs(x, engine=nisa.vector_engine):
    a = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
    b = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=a, engine=engine)
    nisa.rng(dst=b, engine=engine)
    out = nl.ndarray((128, 128), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out[:, 0:64], src=a)
    nisa.tensor_copy(dst=out[:, 64:128], src=b)
    return out


@pytest.mark.parametrize("engine", [nisa.vector_engine, nisa.gpsimd_engine])
def test_rng_calls_draw_successive_stream_elements(engine):
    out, prog = _seeded(_two_rngs, engine=engine)
    stream = stream_bits(1234, 0, 2 * 128 * 64)
    assert np.array_equal(out[:, :64].reshape(-1), stream[: 128 * 64])
    assert np.array_equal(out[:, 64:].reshape(-1), stream[128 * 64:])
    rngs = [i for i in prog.instructions if i.opcode is Opcode.RNG]
    assert [i.imm["offset"] for i in rngs] == [0, 128 * 64]
    assert {i.engine for i in rngs} == {Engine.VECTOR if engine is nisa.vector_engine else Engine.GPSIMD}
    assert any(i.opcode is Opcode.TENSOR_COPY and i.name == "set_rng_seed" for i in prog.instructions)


def test_same_seed_same_values_other_seed_other_values():
    a, _ = _seeded(_two_rngs, seed=77)
    b, _ = _seeded(_two_rngs, seed=77)
    c, _ = _seeded(_two_rngs, seed=78)
    assert np.array_equal(a, b)
    assert np.mean(a == c) < 0.01


def test_set_rng_seed_copies_the_seed_and_reseeding_restarts_the_stream():
    """The state is the seed's value when set_rng_seed ran (overwriting the tile later changes
    nothing); seeding again restarts at stream position 0."""
    def body(x):
        s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=9)
        nisa.set_rng_seed(s)
        nisa.memset(dst=s, value=10)
        a = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=a)
        nisa.set_rng_seed(s)
        b = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=b)
        out = nl.ndarray((128, 128), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out[:, 0:64], src=a)
        nisa.tensor_copy(dst=out[:, 64:128], src=b)
        return out

    out, _ = _seeded(body, seed=None)
    assert np.array_equal(out[:, :64].reshape(-1), stream_bits(9, 0, 128 * 64))
    assert np.array_equal(out[:, 64:].reshape(-1), stream_bits(10, 0, 128 * 64))


def test_unseeded_rng_is_deterministic_seed_zero():
    def body(x):
        t = nl.ndarray((4, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t)
        return t

    out, _ = _seeded(body, seed=None)
    assert np.array_equal(out.reshape(-1), stream_bits(0, 0, 32))


def test_nisa_dropout_scalar_and_per_partition_prob():
    def body(x):
        p = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(dst=p, pattern=[[0, 1]], offset=0, channel_multiplier=1)
        nisa.tensor_scalar(dst=p, data=p, op0=nl.multiply, operand0=1.0 / 127)
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=a, data=x, prob=0.25)
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=b, data=x, prob=p)
        out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out[:, 0:64], src=a)
        nisa.tensor_copy(dst=out[:, 64:128], src=b)
        return out

    out, _ = _seeded(body)
    u = uniform_of(stream_bits(1234, 0, 2 * X.size))
    drop_a = u[: X.size].reshape(X.shape) < np.float32(0.25)
    probs = (np.arange(128, dtype=np.float32) * np.float32(1.0 / 127)).reshape(128, 1)  # iota * (1/127)
    drop_b = u[X.size:].reshape(X.shape) < probs
    assert np.array_equal(out[:, :64], np.where(drop_a, 0, X))
    assert np.array_equal(out[:, 64:], np.where(drop_b, 0, X))
    assert np.all(out[-1, 64:] == 0) and np.array_equal(out[0, 64:], X[0])
    assert abs(drop_a.mean() - 0.25) < 0.03


def test_nl_random_seed_rand_and_dropout():
    """nl.rand is uniform on [0, 1) (the top 24 bits of rng); nl.random_seed(int) seeds it; nl.dropout
    zeroes about ``rate`` of the elements and leaves the rest as they were (unscaled)."""
    out, _ = _seeded(lambda x: (nl.random_seed(5), nl.rand((128, 512)))[1], seed=None)
    assert out.dtype == np.float32 and 0.0 <= out.min() and out.max() < 1.0
    assert abs(out.mean() - 0.5) < 0.01
    assert np.array_equal(out.reshape(-1), uniform_of(stream_bits(5, 0, out.size)))
    again, _ = _seeded(lambda x: (nl.random_seed(5), nl.rand((128, 512)))[1], seed=None)
    assert np.array_equal(out, again)
    dropped, _ = _seeded(lambda x: (nl.random_seed(6), nl.dropout(x, 0.5))[1], seed=None)
    zero = dropped == 0
    assert abs(zero.mean() - 0.5) < 0.05
    assert np.array_equal(dropped[~zero], X[~zero])
    cast, _ = _seeded(lambda x: (nl.random_seed(6), nl.dropout(x, 0.5, dtype=nl.bfloat16))[1], seed=None)
    assert np.array_equal(cast.astype(np.float32), dropped.astype(cast.dtype).astype(np.float32))


def _raises(body, cls, match):
    @nki.jit
    def k(x_hbm):
        body(nl.load(x_hbm))
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        return out

    with pytest.raises(cls, match=match) as info:
        k.specialize((X,))
    assert "test_prng.py" in str(info.value)


def _tile(shape, dtype, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


@pytest.mark.parametrize("body,cls,match", [
    (lambda x: nisa.set_rng_seed(_tile((1, 2), nl.uint32)), ConstraintError, r"\[1, 1\] tile"),
    (lambda x: nisa.set_rng_seed(_tile((2, 1), nl.int32)), ConstraintError, r"\[1, 1\] tile"),
    (lambda x: nisa.set_rng_seed(_tile((1, 1), nl.bfloat16)), DtypeError, "32-bit value"),
    (lambda x: nisa.set_rng_seed(_tile((1, 1), nl.uint32, nl.shared_hbm)), ConstraintError, "SBUF or PSUM"),
    (lambda x: nisa.rng(dst=_tile((128, 8), nl.float32)), DtypeError, "integer tile"),
    (lambda x: nisa.rng(dst=_tile((128, 8), nl.uint32, nl.psum), engine=nisa.gpsimd_engine),
     EngineAccessError, "PSUM"),
    (lambda x: nisa.rng(dst=_tile((128, 8), nl.uint32), engine=nisa.scalar_engine), ConstraintError,
     "cannot run on engine"),
    (lambda x: nisa.dropout(dst=_tile((128, 64), nl.bfloat16), data=x, prob=0.5), DtypeError, "data's dtype"),
    (lambda x: nisa.dropout(dst=_tile((128, 32), nl.float32), data=x, prob=0.5), ConstraintError, "128x32"),
    (lambda x: nisa.dropout(dst=_tile((128, 64), nl.float32), data=x, prob=_tile((64, 1), nl.float32)),
     ConstraintError, r"\[128, 1\] tile"),
    (lambda x: nl.dropout(x, 0.5, mask=True), UnsupportedError, "mask="),
])
def test_checks_name_the_kernel_line(body, cls, match):
    _raises(body, cls, match)
