"""nki.language: creation, tile sizes, dtypes, math/convenience operations against numpy."""

import functools

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.language as nl
from neuronsim.sim.ir import Engine, Opcode

RNG = np.random.default_rng(7)
X = RNG.standard_normal((128, 64), dtype=np.float32)
Y = RNG.standard_normal((128, 64), dtype=np.float32)
COL = RNG.standard_normal((128, 1), dtype=np.float32)


def run(fn, *arrays):
    @nki.jit
    def k(*hbm):
        res = fn(*[nl.load(h) for h in hbm])
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    return nki.simulate(k)(*arrays), k.specialize(arrays).instances[0].programs[0]


@pytest.mark.parametrize(
    "name,ref",
    [
        ("exp", np.exp),
        ("tanh", np.tanh),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        ("relu", lambda x: np.maximum(x, 0)),
        ("square", np.square),
        ("abs", np.abs),
        ("sign", np.sign),
        ("negative", np.negative),
    ],
)
def test_unary(name, ref):
    out, _ = run(getattr(nl, name), X)
    np.testing.assert_allclose(out, ref(X), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize(
    "name,ref",
    [
        ("add", np.add),
        ("subtract", np.subtract),
        ("multiply", np.multiply),
        ("maximum", np.maximum),
        ("minimum", np.minimum),
        ("divide", np.divide),
    ],
)
def test_binary_tile_tile_scalar_and_column(name, ref):
    fn = getattr(nl, name)
    for args, expect in (((X, Y), ref(X, Y)), ((X, COL), ref(X, COL))):
        out, _ = run(fn, *args)
        np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6)
    out, _ = run(lambda t: fn(3.0, t), X)  # scalar on the left: reversed operands
    np.testing.assert_allclose(out, ref(3.0, X), rtol=1e-6, atol=1e-6)


def _recorded(fn, *arrays):
    """What a kernel applying ``fn`` to loaded tiles records: (opcode, engine, imm, dtype) each."""
    prog = run(fn, *arrays)[1]
    return [(i.opcode, i.engine, i.imm, i.dst.tensor.dtype if i.dst else None) for i in prog.instructions]


@pytest.mark.parametrize(
    "operator,name,swap",
    [
        (lambda a, b: a + b, "add", False),
        (lambda a, b: a - b, "subtract", False),
        (lambda a, b: a * b, "multiply", False),
        (lambda a, b: a / b, "divide", False),
        (lambda a, b: a**b, "power", False),
        (lambda a, b: a < b, "less", False),
        (lambda a, b: a <= b, "less_equal", False),
        (lambda a, b: a > b, "greater", False),
        (lambda a, b: a >= b, "greater_equal", False),
        (lambda a, b: a & b, "bitwise_and", False),
        (lambda a, b: a | b, "bitwise_or", False),
        (lambda a, b: a ^ b, "bitwise_xor", False),
        (lambda a, b: 2.0 + a, "add", True),
        (lambda a, b: 2.0 - a, "subtract", True),
        (lambda a, b: 2.0 * a, "multiply", True),
        (lambda a, b: 2.0 / a, "divide", True),
    ],
)
def test_each_python_operator_is_its_nl_operation(operator, name, swap):
    """``a + b`` records what ``nl.add(a, b)`` records (``2.0 + a``: ``nl.add(2.0, a)``), dtype included."""
    fn = getattr(nl, name)
    ints = name.startswith("bitwise")
    arrays = (X.astype(np.int32), Y.astype(np.int32)) if ints else (X, Y)
    expect = (lambda a, b: fn(2.0, a)) if swap else fn
    assert _recorded(operator, *arrays) == _recorded(expect, *arrays)


def test_negation_and_item_assignment_are_nl_operations():
    assert _recorded(lambda a: -a, X) == _recorded(nl.negative, X)

    def assigned(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        out[:, 0:32] = a[:, 32:64]
        out[:, 32:64] = 1.5
        return out

    def explicit(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nl.assign(out[:, 0:32], a[:, 32:64])
        nl.assign(out[:, 32:64], 1.5)
        return out

    assert _recorded(assigned, X) == _recorded(explicit, X)
    assert [op for op, *_ in _recorded(assigned, X)][1:3] == [Opcode.TENSOR_COPY, Opcode.MEMSET]


def test_operators_on_tiles():
    out, _ = run(lambda a, b: (a - b) * 2.0 + b / 4.0, X, Y)
    np.testing.assert_allclose(out, (X - Y) * 2 + Y / 4, rtol=1e-6, atol=1e-6)


def test_reductions_keep_a_partition_dim():
    for name, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)):
        out, _ = run(functools.partial(getattr(nl, name), axis=1), X)
        assert out.shape == (128, 1)
        np.testing.assert_allclose(out[:, 0], ref(X, axis=1), rtol=1e-5, atol=1e-6)


def test_softmax_rms_norm_where():
    out, prog = run(lambda t: nl.softmax(t, axis=1), X)
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert [(i.opcode, i.engine) for i in prog.instructions][1:3] == [
        (Opcode.TENSOR_REDUCE, Engine.VECTOR),
        (Opcode.ACTIVATION, Engine.SCALAR),
    ]
    out, _ = run(lambda t, w: nl.rms_norm(t, w, axis=1, n=64), X, Y)
    np.testing.assert_allclose(
        out, X / np.sqrt((X * X).mean(1, keepdims=True) + 1e-6) * Y, rtol=1e-5, atol=1e-6
    )
    out, _ = run(lambda a, b: nl.where(nl.greater(a, b), a, b), X, Y)
    np.testing.assert_array_equal(out, np.maximum(X, Y))


def test_matmul_and_transpose():
    a = RNG.standard_normal((64, 128), dtype=np.float32)
    b = RNG.standard_normal((128, 256), dtype=np.float32)
    out, prog = run(lambda x, y: nl.copy(nl.matmul(x, y)), a, b)  # x [M, K]: transposed first
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert [i.opcode for i in prog.instructions].count(Opcode.NC_TRANSPOSE) == 1
    out, _ = run(lambda x, y: nl.copy(nl.matmul(x, y, transpose_x=True)), a.T.copy(), b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    out, _ = run(nl.transpose, X)
    np.testing.assert_array_equal(out, X.T)


def test_creation_and_assignment():
    def body(t):
        z = nl.zeros((128, 64), dtype=nl.float32)
        z[:, 0:32] = t[:, 32:64]  # a copy
        z[:, 32:64] = 5.0  # a memset
        return z

    out, _ = run(body, X)
    np.testing.assert_array_equal(out[:, :32], X[:, 32:])
    assert np.all(out[:, 32:] == 5.0)
    out, _ = run(lambda t: nl.full((128, 4), 2.5, dtype=nl.bfloat16) + nl.ones_like(t[:, 0:4]), X)
    assert out.dtype.name == "float32" and np.all(out == 3.5)
    out, _ = run(lambda t: nl.copy(nl.shared_identity_matrix(128, dtype=nl.float32)), X)
    np.testing.assert_array_equal(out, np.eye(128, dtype=np.float32))


def test_tile_size_constants_follow_the_chip():
    seen = {}

    @nki.jit
    def k(a):
        ts = nl.tile_size
        seen[a.shape[0]] = (
            ts.pmax,
            ts.gemm_stationary_fmax,
            ts.gemm_moving_fmax,
            ts.psum_bank_fmax,
            ts.psum_fmax,
            ts.psum_num_banks,
            ts.bn_stats_fmax,
            ts.total_available_sbuf_size,
        )
        return a

    k.specialize((np.zeros((1, 1), np.float32),), chip="trn2")
    k.specialize((np.zeros((2, 1), np.float32),), chip="trn3")
    assert seen[1] == (128, 128, 512, 512, 512, 8, 512, 212984)
    assert seen[2][-1] == 245752


def test_dtypes_compare_with_numpy():
    assert nl.float32 == np.float32 and nl.bfloat16 == "bfloat16" and nl.int32 == np.dtype("int32")
    assert nl.bool_ == "bool" and nl.float32 != nl.bfloat16
    assert nl.fp32.min == np.finfo(np.float32).min


def test_floor_ceil_trunc_are_exact_including_negative_fractions():
    x = (X * 10).copy()
    x[0, :5] = [-2.0, -2.5, 2.5, -1e-30, -0.0]
    for name, ref in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc)):
        out, prog = run(getattr(nl, name), x)
        np.testing.assert_array_equal(out, ref(x))
        assert {i.engine for i in prog.instructions if i.opcode is not Opcode.DMA_COPY} == {Engine.VECTOR}
    out, _ = run(functools.partial(nl.floor, dtype=nl.int32), x)
    assert out.dtype == np.int32 and np.array_equal(out, np.floor(x))


def test_where_broadcasts_a_one_partition_tile_across_partitions():
    row = RNG.standard_normal((1, 64), dtype=np.float32)
    out, _ = run(lambda a, r: nl.where(a > 0, r, 0.0), X, row)
    np.testing.assert_array_equal(out, np.where(X > 0, row, 0.0))
