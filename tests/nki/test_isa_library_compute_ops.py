"""The compute nisa calls AWS's kernel library needed beyond the first set (issue 18): matmul's
transpose mode, ScalarE/VectorE functions and scans, and NeuronCore-v4's exponential, activate2 and
rand2 — each against a numpy reference through the frontend, and its misuse errors with the kernel's
file:line. The rest are in test_isa_library_ops.py."""

import numpy as np
import pytest
from nki_checks import raises_at

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, UnsupportedError

RNG = np.random.default_rng(18)


# ---------------------------------------------------------------- nc_matmul transpose mode

@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_matmul_transpose_mode_lands_bf16_bits_in_a_bf16_psum_tile(chip):
    """S10: from NeuronCore-v3, ``is_transpose=True`` transposes the stationary tile bit-exactly into a
    PSUM tile of its own 16-bit dtype — on v4 too, where a bf16 PSUM tile could also take a matmul
    (nki-library's moe_cte transposes its hidden states this way)."""
    import ml_dtypes

    x = RNG.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)

    @nki.jit
    def transpose_by_identity(a):
        out = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a)
        identity = nl.shared_identity_matrix(128, dtype=a.dtype)
        flipped = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=flipped, stationary=tile, moving=identity, is_transpose=True)
        result = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=flipped)
        nisa.dma_copy(dst=out, src=result)
        return out

    got = nki.simulate(transpose_by_identity, chip=chip)(x)
    assert got.dtype == x.dtype and np.array_equal(got.view(np.uint16), x.T.view(np.uint16))


# ---------------------------------------------------------------- exponential

def test_exponential_is_a_softmax_numerator_with_its_row_sum_on_trn3():
    x = RNG.standard_normal((128, 300)).astype(np.float32) * 3

    @nki.jit
    def softmax_parts(a):
        num = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        den = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1)
        e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e, src=t, max_value=m, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(num, e)
        nl.store(den, s)
        return num, den

    num, den = nki.simulate(softmax_parts, chip="trn3")(x)
    want = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(num, want, rtol=4e-6)  # x - max is rounded to fp32 first
    np.testing.assert_allclose(den[:, 0], want.sum(axis=1), rtol=1e-5)


def test_exponential_misuse_names_the_line():
    x = np.zeros((128, 64), np.float32)

    @nki.jit
    def idle_with_sum(a):
        t = nl.load(a)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=t, src=t, reduce_res=s)  # <- here
        return a

    @nki.jit
    def on_trn2(a):
        t = nl.load(a)
        nisa.exponential(dst=t, src=t)  # <- here
        nl.store(a, t)
        return a

    raises_at(idle_with_sum, (x,), UnsupportedError, "reduce_cmd=idle reads an accumulator")
    with pytest.raises(ConstraintError,
                       match=r"test_isa_library_compute_ops.py:\d+: exponential.*NeuronCore-v4"):
        nki.simulate(on_trn2, chip="trn2")(x.copy())


# ---------------------------------------------------------------- gelu_apprx_sigmoid

def test_gelu_apprx_sigmoid_is_x_times_sigmoid_of_1_702_x():
    """nki-library's Swish (ActFnType.Swish -> nl.gelu_apprx_sigmoid) as its torch references define
    it: ``x * sigmoid(1.702 x)``, on ScalarE through ``nisa.activation`` and as ``nl`` function."""
    x = (RNG.standard_normal((128, 64)) * 4).astype(np.float32)

    @nki.jit
    def swish(a):
        out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a)
        by_isa = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=by_isa, op=nl.gelu_apprx_sigmoid, data=tile)
        nisa.dma_copy(dst=out[:, 0:64], src=by_isa)
        nisa.dma_copy(dst=out[:, 64:128], src=nl.gelu_apprx_sigmoid(tile))
        return out

    got = nki.simulate(swish)(x)
    want = x / (1 + np.exp(-1.702 * x.astype(np.float64)))
    np.testing.assert_allclose(got[:, :64], want, rtol=1e-6, atol=1e-30)
    np.testing.assert_array_equal(got[:, :64], got[:, 64:])


# ---------------------------------------------------------------- tensor_scalar_cumulative

def test_tensor_scalar_cumulative_running_sum_and_loaded_max():
    """S16's pseudocode through the frontend: a scaled running sum (reset_reduce) and a running max
    from a per-partition start (load_reduce, imm1 a [P, 1] tile)."""
    x = RNG.standard_normal((128, 40)).astype(np.float32)
    start = RNG.standard_normal((128, 1)).astype(np.float32)

    @nki.jit
    def k(a, s):
        total = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        peak = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t, s0 = nl.load(a), nl.load(s)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=y, src=t, op0=nl.multiply, op1=nl.add, imm0=0.5)
        nl.store(total, y)
        z = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(z, t, nl.add, nl.maximum, imm0=0.0, imm1=s0,
                                      reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(peak, z)
        return total, peak

    total, peak = nki.simulate(k)(x, start)
    want = np.empty_like(x)
    acc = np.zeros(128, np.float32)
    for i in range(40):
        acc = (acc + x[:, i] * np.float32(0.5)).astype(np.float32)
        want[:, i] = acc
    np.testing.assert_array_equal(total, want)
    running_max = np.maximum.accumulate(np.concatenate([start, x], axis=1), axis=1)
    np.testing.assert_array_equal(peak, running_max[:, 1:])


def test_tensor_scalar_cumulative_misuse_names_the_line():
    x = np.zeros((128, 8), np.float32)

    @nki.jit
    def carried(a):
        t = nl.load(a)
        nisa.tensor_scalar_cumulative(t, t, nl.add, nl.add, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)  # <- here
        return a
    raises_at(carried, [x], UnsupportedError, "reduce_cmd=reduce continues VectorE's accumulator")

    @nki.jit
    def no_start(a):
        t = nl.load(a)
        load_reduce = nisa.reduce_cmd.load_reduce
        nisa.tensor_scalar_cumulative(t, t, nl.add, nl.add, 0.0, reduce_cmd=load_reduce)  # <- here
        return a
    raises_at(no_start, [x], ConstraintError, "imm1 is None")


# ---------------------------------------------------------------- activate2 (NeuronCore-v4)

ACTIVATE2_STAGES = [  # (op0, op1, reverse0, reverse1, numpy model of the tensor-scalar stage)
    (nl.multiply, nl.add, False, False, lambda x, a, b: x * a + b),
    (nl.multiply, nl.subtract, False, False, lambda x, a, b: x * a - b),
    (nl.multiply, nl.subtract, False, True, lambda x, a, b: b - x * a),
    (nl.multiply, nl.bypass, True, False, lambda x, a, b: a * x),
    (nl.add, nl.bypass, False, False, lambda x, a, b: x + a),
    (nl.subtract, nl.bypass, False, False, lambda x, a, b: x - a),
    (nl.subtract, nl.bypass, True, False, lambda x, a, b: a - x),
    (nl.bypass, nl.bypass, False, False, lambda x, a, b: x),
]


@pytest.mark.parametrize("stage", range(len(ACTIVATE2_STAGES)))
@pytest.mark.parametrize("tiles", [False, True], ids=["immediates", "tiles"])
def test_activate2_tensor_scalar_stages_then_the_function(tiles, stage):
    """S16: dst = op((data op0 imm0) op1 imm1), each step in fp32 (op = copy here, so the stage is
    seen exactly), with the row sum into reduce_res; imm0/imm1 floats or [P, 1] tiles."""
    x = RNG.standard_normal((64, 24)).astype(np.float32)
    a, b = RNG.standard_normal((64, 1)).astype(np.float32), RNG.standard_normal((64, 1)).astype(np.float32)
    op0, op1, rev0, rev1, model = ACTIVATE2_STAGES[stage]

    @nki.jit
    def k(d, i0, i1):
        out = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        sums = nl.ndarray((d.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(d)
        imm0, imm1 = (nl.load(i0), nl.load(i1)) if tiles else (float(a[0, 0]), float(b[0, 0]))
        y = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.sbuf)
        r = nl.ndarray((d.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activate2(y, nl.copy, t, imm0, imm1, op0, op1, reverse0=rev0, reverse1=rev1, reduce_op=nl.add,
                       reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(out, y)
        nl.store(sums, r)
        return out, sums

    got, sums = nki.simulate(k, chip="trn3")(x, a, b)
    ia, ib = (a, b) if tiles else (a[0, 0], b[0, 0])
    want = model(x, ia, ib).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(sums[:, 0], want.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_activate2_misuse_names_the_line():
    x = np.zeros((64, 8), np.float32)

    @nki.jit
    def stage(d):
        t = nl.load(d)
        nisa.activate2(t, nl.exp, t, 1.0, 2.0, nl.add, nl.add)  # <- here
        return d
    with pytest.raises(ConstraintError, match="not one of the six tensor-scalar stages"):
        stage.specialize([x], chip="trn3")

    @nki.jit
    def on_trn2(d):
        t = nl.load(d)
        nisa.activate2(t, nl.exp, t, 1.0, 2.0, nl.multiply, nl.add)  # <- here
        return d
    raises_at(on_trn2, [x], ConstraintError, "NeuronCore-v4")


# ---------------------------------------------------------------- XORWOW state and rand2 (NeuronCore-v4)

def test_rand2_from_a_set_state_is_reproducible_and_get_state_reads_it_back():
    """rand_set_state seeds VectorE's 24 words per lane; two rand2 calls draw different values in
    [min, max]; the same seeds give the same values; rand_get_state returns the advanced state; the
    GpSimd state round-trips unchanged."""
    seeds = RNG.integers(1, 2**32, (32, 24), dtype=np.uint64).astype(np.uint32)
    g_seeds = RNG.integers(1, 2**32, (32, 6), dtype=np.uint64).astype(np.uint32)

    @nki.jit
    def k(s, g):
        a = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        b = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        st = nl.ndarray((32, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
        gs = nl.ndarray((32, 6), dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.rand_set_state(nl.load(s), engine=nisa.engine.vector)
        nisa.rand_set_state(nl.load(g))
        for out in (a, b):
            y = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.rand2(y, min=-1.0, max=1.0)
            nl.store(out, y)
        for out, eng in ((st, nisa.engine.vector), (gs, nisa.engine.gpsimd)):
            t = nl.ndarray(out.shape, dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rand_get_state(t, engine=eng)
            nl.store(out, t)
        return a, b, st, gs

    a, b, st, gs = nki.simulate(k, chip="trn3")(seeds, g_seeds)
    a2, _, _, _ = nki.simulate(k, chip="trn3")(seeds, g_seeds)
    assert np.array_equal(a, a2) and not np.array_equal(a, b)
    assert a.min() >= -1 and a.max() <= 1 and np.unique(a).size > 400
    assert np.array_equal(gs, g_seeds) and not np.array_equal(st, seeds)
    assert np.array_equal(st[:, 5::6], (seeds[:, 5::6].astype(np.uint64) + 8 * 362437).astype(np.uint32))


def test_xorwow_misuse_names_the_line():
    @nki.jit
    def wrong_words(s):
        nisa.rand_set_state(nl.load(s))  # <- here
        return s
    raises_at(wrong_words, [np.zeros((8, 24), np.uint32)], ConstraintError,
              "6 uint32 words per lane on gpsimd")

    @nki.jit
    def on_trn2(s):
        y = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(y, min=0.0, max=1.0)  # <- here
        return s
    raises_at(on_trn2, [np.zeros((8, 6), np.uint32)], ConstraintError, "rand2 exists on NeuronCore-v4")
