"""The Numba executor's fast paths agree bit for bit with the plain definitions they replace.

Register-tiled matmul vs ``matmul_np`` (tile edges, few columns, strided rows, specials), and the
row-wise fast paths of memory/access.py and memory/copy.py vs the numpy reference executor
(contiguous and strided APs, partial tiles, every dtype, overlapping copies).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from neuronsim.sim.engines.tensor import _matmul_panel, fma_f32_np, matmul_f32, matmul_np
from neuronsim.sim.memory.numerics import canonicalize_nan


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _specials(rng, shape) -> np.ndarray:
    """Normal values with NaN, +-inf, +-0, subnormals and huge values sprinkled in."""
    x = rng.standard_normal(shape).astype(np.float32)
    picks = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-42, 3e38, -2e38], dtype=np.float32)
    mask = rng.random(shape) < 0.05
    x[mask] = rng.choice(picks, size=int(mask.sum()))
    return x


def _fma_exact(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """``a * b + c`` in exact rationals, rounded once to the nearest fp32 (ties to even)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = np.float32(float(exact))  # within an ulp: the answer is it or a neighbour
    candidates = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    return min(candidates, key=lambda x: (abs(Fraction(float(x)) - exact), int(x.view(np.uint32)) & 1))


def test_fma_f32_np_rounds_once():
    """The reference FMA against exact rationals: random operands at every scale (subnormal
    products included), and sums that land within 2^-46 ulp of an fp32 tie, where rounding the
    float64 sum to nearest and then to fp32 (double rounding) gives the wrong neighbour."""
    rng = np.random.default_rng(7)
    n = 4000
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 60, n)).astype(np.float32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 60, n)).astype(np.float32)
    c = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 100, n)).astype(np.float32)
    c[::3] = -(a[::3].astype(np.float64) * b[::3]).astype(np.float32)  # cancellation
    one_up, below_one = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23)
    hard_a = np.array([one_up, -one_up, one_up], np.float32)
    hard_b = np.array([below_one * 2 ** -24, below_one * 2 ** -24, -below_one * 2 ** -24], np.float32)
    hard_c = np.array([one_up, -one_up, -one_up], np.float32)  # exact: c + 2^-24 - 2^-70 (a tie, nearly)
    a, b, c = np.concatenate([a, hard_a]), np.concatenate([b, hard_b]), np.concatenate([c, hard_c])
    want = np.array([_fma_exact(x, y, z) for x, y, z in zip(a, b, c, strict=True)], np.float32)
    np.testing.assert_array_equal(_bits(fma_f32_np(a, b, c)), _bits(want))
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    assert not np.array_equal(_bits(naive[-3:]), _bits(want[-3:]))  # the hard cases are hard


def _fma_chain(s: np.ndarray, mv: np.ndarray) -> np.ndarray:
    """The definition matmul_np implements: one ``fma_f32_np`` per k over the whole tile."""
    total = np.zeros((s.shape[1], mv.shape[1]), np.float32)
    for k in range(s.shape[0]):
        total = fma_f32_np(s[k][:, None], mv[k][None, :], total)
    return total


@pytest.mark.parametrize("scale", ["unit", "tiny", "ties"])
def test_matmul_np_short_cut_is_the_fma_chain(scale):
    """matmul_np rounds the float64 sum straight to fp32 except at fp32 ties and subnormal partial
    sums: bit for bit the chain of exact FMAs, on data where the short cut alone would be wrong
    (double rounding at a tie; subnormal sums from tiny operands)."""
    rng = np.random.default_rng({"unit": 1, "tiny": 2, "ties": 3}[scale])
    k, m, n = 24, 9, 33
    if scale == "unit":
        s, mv = _specials(rng, (k, m)), _specials(rng, (k, n))
    elif scale == "tiny":  # products near 2^-140: partial sums in fp32's subnormal range
        s = (rng.standard_normal((k, m)) * 2.0 ** -70).astype(np.float32)
        mv = (rng.standard_normal((k, n)) * 2.0 ** -70).astype(np.float32)
    else:  # integers past 2^24: sums land on fp32 ties
        s = rng.integers(-3, 4, (k, m)).astype(np.float32)
        mv = (rng.integers(1, 4, (k, n)) * 2.0 ** rng.integers(20, 26, (k, n))).astype(np.float32)
    one_up, below_one = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23)
    s[:2, 0], mv[:2, 0] = [1, one_up], [one_up, below_one * 2 ** -24]  # element [0, 0] of the first
    s[2:, 0], mv[2:, 0] = 0, 1  # two steps: one_up, then fma(one_up, ~2^-24, one_up): a double-rounding case
    with np.errstate(all="ignore"):
        want, got = _fma_chain(s, mv), matmul_np(s, mv)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    naive = np.float32(np.float64(one_up) * np.float64(below_one * np.float32(2 ** -24)) + np.float64(one_up))
    assert naive.view(np.uint32) != want[0, 0].view(np.uint32)  # the short cut alone would differ
    if scale == "tiny":
        assert np.any((np.abs(want) < 2.0 ** -126) & (want != 0))  # subnormal results were made


# (K, M, N): full tiles, each kind of edge (rows % 4, columns % 16, % 64), N < 16 (the swapped
# roles), K = 1, and the 1-wide shapes
SHAPES = [(128, 128, 128), (128, 128, 512), (64, 64, 32), (32, 64, 64), (7, 13, 70), (1, 4, 16),
          (3, 5, 1), (128, 128, 1), (128, 1, 128), (9, 130, 15), (16, 3, 17), (5, 67, 81), (2, 1, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_f32_matches_the_definition(shape):
    k, m, n = shape
    rng = np.random.default_rng(k * 10000 + m * 100 + n)
    s, mv = _specials(rng, (k, m)), _specials(rng, (k, n))
    with np.errstate(all="ignore"):  # inf - inf and overflow are values here
        want = matmul_np(s, mv)
    got = matmul_f32(s, mv)
    assert got.shape == (m, n)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan])


@pytest.mark.parametrize("shape", [(128, 128, 128), (7, 13, 70), (9, 130, 15), (5, 67, 81)],
                         ids=lambda s: "x".join(map(str, s)))
def test_matmul_panel_accumulates_onto_psum_as_psum_does(shape):
    """The panel stores ``old + sum`` (the sum formed first) straight into PSUM rows with a pitch,
    NaNs canonical, old NaN payloads and infinities included; the columns beside the window keep
    their bits."""
    k, m, n = shape
    rng = np.random.default_rng(k + m + n)
    s, mv = _specials(rng, (k, m)), _specials(rng, (k, n))
    rows = _specials(rng, (m, n + 24))
    rows[0, :4] = np.array([0x7FA00001, 0xFFC00000, 0x7F800000, 0x80000000], np.uint32).view(np.float32)
    before = rows.copy()
    with np.errstate(all="ignore"):
        want = canonicalize_nan(rows[:, 3:3 + n] + matmul_np(s, mv))
    _matmul_panel(s, mv, rows[:, 3:3 + n], True)
    np.testing.assert_array_equal(_bits(rows[:, 3:3 + n]), _bits(want))
    np.testing.assert_array_equal(_bits(rows[:, :3]), _bits(before[:, :3]))
    np.testing.assert_array_equal(_bits(rows[:, 3 + n:]), _bits(before[:, 3 + n:]))


def test_matmul_f32_of_strided_rows():
    """Rows with a pitch larger than their length (SBUF views), and cancellation-heavy data where
    any change of summation order or an FMA would show."""
    rng = np.random.default_rng(1)
    big_s = (rng.standard_normal((96, 200)) * 1e4).astype(np.float32)
    big_m = (rng.standard_normal((96, 300)) * 1e-3).astype(np.float32)
    s, mv = big_s[:, 3:3 + 72], big_m[:, 5:5 + 131]
    np.testing.assert_array_equal(_bits(matmul_f32(s, mv)), _bits(matmul_np(s, mv)))


# ---------------------------------------------------------------- program level: both executors

from neuronsim import sim  # noqa: E402
from neuronsim.sim import Opcode, ProgramBuilder  # noqa: E402
from neuronsim.sim.dtypes import DType  # noqa: E402

RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _random_bits(rng, decl) -> np.ndarray:
    """Raw random bit patterns (every NaN payload, -0.0, subnormals...) for an HBM tensor, mixed
    with normal values for float dtypes."""
    raw = rng.integers(0, 2 ** (8 * decl.dtype.itemsize), size=decl.shape, dtype=np.uint64)
    values = raw.astype(RAW[decl.dtype.itemsize]).view(decl.dtype.numpy)
    if decl.dtype.is_float:  # and ordinary values, where rounding and summation order show
        normal = rng.random(decl.shape) < 0.7
        values[normal] = rng.standard_normal(int(normal.sum())).astype(decl.dtype.numpy)
    return values


def _assert_executors_agree(b: ProgramBuilder, seed: int = 0) -> None:
    program = b.build()
    rng = np.random.default_rng(seed)
    inputs = {t.name: _random_bits(rng, t) for t in program.hbm_tensors() if t.kind in ("input", "inout")}
    results = {}
    for executor in ("reference", "numba"):
        arrays = {name: a.copy() for name, a in inputs.items()}
        out = sim.run(program, arrays, "trn2", executor=executor, uninitialized_memory="zero").outputs
        results[executor] = {name: np.ascontiguousarray(a).view(np.uint8).copy() for name, a in out.items()}
    assert results["numba"].keys() == results["reference"].keys()
    for name, ref in results["reference"].items():
        np.testing.assert_array_equal(results["numba"][name], ref, err_msg=name)


ALL_DTYPES = [d.name for d in DType if d is not DType.bool_]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_copies_of_every_dtype(dtype):
    """Same-dtype DMA in and out (runs of whole tiles), tensor_copy between SBUF tiles at a
    partition offset, and a partial tile with an odd free size (runs shorter than a memcpy)."""
    b = ProgramBuilder("copies")
    a = b.hbm("a", (64, 70), dtype)
    s = b.sbuf("s", (64, 70), dtype)
    t = b.sbuf("t", (128, 70), dtype)
    o = b.hbm("o", (64, 70), dtype, kind="output")
    o2 = b.hbm("o2", (37, 3), dtype, kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.TENSOR_COPY, t.ap([[70, 64], [1, 70]], offset=64 * 70), [s], engine=sim.Engine.VECTOR)
    b.emit(Opcode.DMA_COPY, o, [t.ap([[70, 64], [1, 70]], offset=64 * 70)])
    b.emit(Opcode.DMA_COPY, o2, [s.ap([[70, 37], [1, 3]], offset=5)])
    _assert_executors_agree(b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_strided_copies_by_runs(dtype):
    """Head-split style moves: HBM rows of 64 elements at a partition step, interleaved free dims
    on both sides (runs of different lengths: copied by their common divisor), a reversed dim and
    a broadcast dim (no runs), and an HBM -> HBM copy onto an overlapping range of the same
    tensor (read all, then write)."""
    b = ProgramBuilder("strided")
    a = b.hbm("a", (64, 256), dtype)
    s = b.sbuf("s", (64, 4, 64), dtype)
    r = b.sbuf("r", (64, 128), dtype)
    io = b.hbm("io", (32, 64), dtype, kind="inout")
    o = b.hbm("o", (64, 4, 64), dtype, kind="output")
    o2 = b.hbm("o2", (64, 128), dtype, kind="output")
    b.emit(Opcode.DMA_COPY, s, [a.ap([[256, 64], [64, 4], [1, 64]])])
    b.emit(Opcode.DMA_COPY, o.ap([[256, 64], [1, 32], [32, 8]]), [s.ap([[256, 64], [128, 2], [1, 128]])])
    b.emit(Opcode.DMA_COPY, r.ap([[128, 64], [-1, 64], [64, 2]], offset=63), [a.ap([[256, 64], [1, 128]])])
    b.emit(Opcode.DMA_COPY, o2, [r])
    b.emit(Opcode.DMA_COPY, o2.ap([[128, 64], [0, 2], [1, 64]]), [a.ap([[256, 64], [1, 128]], offset=3)])
    b.emit(Opcode.DMA_COPY, io.ap([[64, 30], [1, 64]], offset=64 + 7), [io.ap([[64, 30], [1, 64]])])
    _assert_executors_agree(b)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "float16", "int8"])
def test_element_copies_between_different_partition_splits(dtype):
    """Copies with no common run (inner steps != 1) move 2- and 4-byte elements word by word
    (1-byte ones through bit patterns): a transposing read into rows of another length (element k
    of src is element k of dst across partitions), a strided write, a partial tile at a partition
    offset, and element rows that end mid-partition on the other side."""
    b = ProgramBuilder("words")
    a = b.hbm("a", (64, 64), dtype)
    s = b.sbuf("s", (128, 64), dtype)
    o = b.hbm("o", (32, 128), dtype, kind="output")
    o2 = b.hbm("o2", (64, 64), dtype, kind="output")
    o3 = b.hbm("o3", (7, 39), dtype, kind="output")
    b.emit(Opcode.DMA_COPY, s.ap([[64, 64], [1, 64]], offset=64 * 64), [a])
    b.emit(Opcode.DMA_COPY, o, [s.ap([[64, 64], [1, 16], [16, 4]], offset=64 * 64)])
    b.emit(Opcode.DMA_COPY, o2.ap([[64, 64], [1, 8], [8, 8]]), [s.ap([[64, 64], [1, 64]], offset=64 * 64)])
    b.emit(Opcode.DMA_COPY, o3, [s.ap([[64, 21], [3, 13]], offset=64 * 70 + 2)])
    _assert_executors_agree(b, seed=11)


def _random_side(rng, factors, reads: bool):
    """An HBM access pattern over elements laid out as a permutation of ``factors`` grouped into
    at most 5 dims (partitions first), with gaps between dims, sometimes a reversed free dim, and
    (on a read side) sometimes a broadcast dim: (pattern, offset, tensor elements)."""
    n_cuts = min(len(factors) - 1, int(rng.integers(0, 5)))
    cuts = sorted(rng.choice(np.arange(1, len(factors)), size=n_cuts, replace=False)) if n_cuts else []
    sizes = [int(np.prod(g)) for g in np.split(np.array(factors), cuts)]
    steps = [0] * len(sizes)
    step = int(rng.choice([1, 1, 1, 2]))  # sometimes every other element
    for d in rng.permutation(len(sizes)):  # memory order: a random permutation of the dims
        steps[d] = step
        step *= sizes[d] + int(rng.choice([0, 0, 1, 3]))
    offset = int(rng.integers(0, 3))
    if len(sizes) > 1 and rng.random() < 0.3:
        d = int(rng.integers(1, len(sizes)))
        offset += (sizes[d] - 1) * steps[d]
        steps[d] = -steps[d]
    if reads and rng.random() < 0.2:
        steps[int(rng.integers(0, len(sizes)))] = 0
    pattern = [[st, n] for st, n in zip(steps, sizes, strict=True)]
    span = offset + sum(max(st, 0) * (n - 1) for st, n in pattern) + 1
    return pattern, offset, span


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("seed", range(12))
def test_copy_nests_of_random_layouts(dtype, seed):
    """HBM -> HBM and HBM -> SBUF -> HBM copies between random layouts of one element order: each
    side groups the same factors into its own dims (splits that the loop nest must line up),
    permuted in memory with gaps, reversed and broadcast dims; plus dst elements written twice
    (overlapping dims: the order must stay row-major) and same-tensor moves, disjoint and
    overlapping. Covers memcpy runs, tile transposes and word loops of 1-, 2- and 4-byte words."""
    rng = np.random.default_rng(seed)
    b = ProgramBuilder("nests")
    for i in range(4):
        factors = [int(f) for f in rng.choice([1, 2, 3, 4, 5, 8, 16, 17, 32], size=rng.integers(1, 6))]
        while np.prod(factors) > 8192:  # a few thousand elements at most
            factors.pop()
        src, s_off, s_span = _random_side(rng, factors, reads=True)
        dst, d_off, d_span = _random_side(rng, factors, reads=i == 3)
        a = b.hbm(f"a{i}", (s_span,), dtype)
        o = b.hbm(f"o{i}", (d_span,), dtype, kind="inout")
        b.emit(Opcode.DMA_COPY, o.ap(dst, offset=d_off), [a.ap(src, offset=s_off)])
        if src[0][1] <= 128:  # through SBUF: dst free dims permuted within a partition
            parts, free = src[0][1], int(np.prod([n for _, n in src[1:]]))
            sb = b.sbuf(f"s{i}", (parts, free + 5), dtype)
            inner, step = [], 1
            for n in reversed([n for _, n in src[1:]]):
                inner.insert(0, [step, n])
                step *= n
            perm = rng.permutation(len(inner))
            b.emit(Opcode.DMA_COPY, sb.ap([[free + 5, parts]] + [inner[j] for j in perm], offset=2),
                   [a.ap([src[0]] + [src[1:][j] for j in perm], offset=s_off)])
            back = b.hbm(f"b{i}", (parts, free), dtype, kind="output")
            b.emit(Opcode.DMA_COPY, back.ap([[free, parts], [1, free]]),
                   [sb.ap([[free + 5, parts], [1, free]], offset=2)])
    c = b.hbm("c", (12,), dtype)
    w = b.hbm("w", (16,), dtype, kind="output")  # elements written twice: the last write wins
    b.emit(Opcode.DMA_COPY, w.ap([[1, 4], [2, 3]]), [c.ap([[3, 4], [1, 3]])])
    b.emit(Opcode.DMA_COPY, w.ap([[2, 3], [1, 4]], offset=6), [c.ap([[1, 3], [3, 4]])])  # src transposed
    io = b.hbm("io", (64, 40), dtype, kind="inout")
    # same tensor: transposed into the other half of the columns, then onto an overlapping range
    b.emit(Opcode.DMA_COPY, io.ap([[1, 32], [40, 20]], offset=20), [io.ap([[40, 32], [1, 20]])])
    b.emit(Opcode.DMA_COPY, io.ap([[40, 30], [1, 37]], offset=43), [io.ap([[1, 30], [40, 37]])])
    _assert_executors_agree(b, seed=seed)


def test_copy_nest_without_common_split():
    """Sides whose dims cannot be split at each other's boundaries (rows of 6 as 2 x 3 against
    3 x 2, rows of 70 against 64) go element by element, still bit-exact."""
    for dtype in ("float32", "bfloat16", "uint8"):
        b = ProgramBuilder("no_split")
        a = b.hbm("a", (64, 70), dtype)
        o = b.hbm("o", (70, 64), dtype, kind="output")
        o2 = b.hbm("o2", (4, 3, 2), dtype, kind="output")
        b.emit(Opcode.DMA_COPY, o, [a.ap([[70, 64], [1, 70]])])
        b.emit(Opcode.DMA_COPY, o2.ap([[6, 4], [1, 3], [3, 2]]), [a.ap([[70, 4], [2, 2], [1, 3]], offset=1)])
        _assert_executors_agree(b, seed=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
@pytest.mark.parametrize("shape", [(128, 128), (100, 37), (1, 64), (64, 1), (130, 20)])
def test_transposes(dtype, shape):
    """dma_transpose HBM -> SBUF and nc_transpose SBUF -> PSUM (word moves), incl. partial tiles."""
    p, f = shape
    if p > 128 and f > 128:
        pytest.skip("not a valid transpose")
    b = ProgramBuilder("transposes")
    a = b.hbm("a", (p, f), dtype)
    s = b.sbuf("s", (f, p), dtype)
    o = b.hbm("o", (f, p), dtype, kind="output")
    b.emit(Opcode.DMA_TRANSPOSE, s, [a])
    b.emit(Opcode.DMA_COPY, o, [s])
    if p <= 128 and f <= 128:
        t = b.sbuf("t", (p, f), dtype)
        pt = b.psum("pt", (f, p), dtype)
        o2 = b.hbm("o2", (f, p), dtype, kind="output")
        b.emit(Opcode.DMA_COPY, t, [a])
        b.emit(Opcode.NC_TRANSPOSE, pt, [t])
        back = b.sbuf("back", (f, p), dtype)
        b.emit(Opcode.TENSOR_COPY, back, [pt], engine=sim.Engine.VECTOR)
        b.emit(Opcode.DMA_COPY, o2, [back])
    _assert_executors_agree(b)


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("bfloat16", "bfloat16"),
                                    ("float8_e4m3", "bfloat16")])
@pytest.mark.parametrize("kmn", [(128, 128, 128), (128, 128, 1), (33, 70, 90), (64, 5, 3)])
def test_matmul_programs(dtypes, kmn):
    """nc_matmul with fp32 inputs read in place and 16-/8-bit inputs converted, accumulating onto
    PSUM, from operands at a free offset (rows with a pitch)."""
    k, m, n = kmn
    b = ProgramBuilder("matmul")
    a = b.hbm("a", (k, m), dtypes[0])
    c = b.hbm("c", (k, n), dtypes[1])
    sa = b.sbuf("sa", (k, m + 3), dtypes[0])
    sc = b.sbuf("sc", (k, n), dtypes[1])
    ps = b.psum("ps", (m, n))
    o = b.hbm("o", (m, n), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, sa.ap([[m + 3, k], [1, m]], offset=3), [a])
    b.emit(Opcode.DMA_COPY, sc, [c])
    b.emit(Opcode.NC_MATMUL, ps, [sa.ap([[m + 3, k], [1, m]], offset=3), sc])
    b.emit(Opcode.NC_MATMUL, ps, [sa.ap([[m + 3, k], [1, m]], offset=3), sc], accumulate=True)
    back = b.sbuf("back", (m, n), "float32")
    b.emit(Opcode.TENSOR_COPY, back, [ps], engine=sim.Engine.VECTOR)
    b.emit(Opcode.DMA_COPY, o, [back])
    _assert_executors_agree(b, seed=k + m + n)


@pytest.mark.parametrize("func", ["copy", "identity", "relu", "square", "exp", "erf", "gelu", "abs"])
def test_activation_loops(func):
    """ScalarE activation: the libm-free functions' own loops and the act_f64 path, with scale and
    bias tiles, reduce, and raw bits in (NaN payloads, -0.0, subnormals, infinities)."""
    from neuronsim.sim import ActFunc, Engine
    b = ProgramBuilder("act")
    a = b.hbm("a", (96, 33), "float32")
    t = b.hbm("t", (96, 2), "float32")
    s, st = b.sbuf("s", (96, 33), "float32"), b.sbuf("st", (96, 2), "float32")
    y, r = b.sbuf("y", (96, 33), "bfloat16"), b.sbuf("r", (96, 1), "float32")
    o, orr = b.hbm("o", (96, 33), "bfloat16", kind="output"), b.hbm("or", (96, 1), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.DMA_COPY, st, [t])
    b.emit(Opcode.ACTIVATION, y, [s, st.ap([[2, 96], [1, 1]]), st.ap([[2, 96], [1, 1]], offset=1)],
           engine=Engine.SCALAR, dst2=r, func=ActFunc[func], bias_is_tile=True, scale_is_tile=True,
           reduce=True)
    b.emit(Opcode.DMA_COPY, o, [y])
    b.emit(Opcode.DMA_COPY, orr, [r])
    _assert_executors_agree(b, seed=3)


@pytest.mark.parametrize("func", ["exp", "erf", "gelu", "copy"])
def test_activation_streams_partition_blocks(func):
    """A tile larger than one block (128 x 600 fp32: three blocks of partitions), computed in place
    (dst is src), into a disjoint bf16 tile with reduce, and onto itself shifted by one
    element (overlapping: the whole tile is read before any is written, as in the reference)."""
    from neuronsim.sim import ActFunc, Engine
    b = ProgramBuilder("act_blocks")
    a = b.hbm("a", (128, 600), "float32")
    s = b.sbuf("s", (128, 600), "float32")
    y, r = b.sbuf("y", (128, 600), "bfloat16"), b.sbuf("r", (128, 1), "float32")
    o = b.hbm("o", (128, 600), "float32", kind="output")
    o2 = b.hbm("o2", (128, 600), "bfloat16", kind="output")
    orr = b.hbm("or", (128, 1), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.ACTIVATION, s, [s], engine=Engine.SCALAR, func=ActFunc[func], scale=0.5)
    b.emit(Opcode.ACTIVATION, y, [s], engine=Engine.SCALAR, dst2=r, func=ActFunc[func], reduce=True)
    b.emit(Opcode.ACTIVATION, s.ap([[600, 128], [1, 599]], offset=1), [s.ap([[600, 128], [1, 599]])],
           engine=Engine.SCALAR, func=ActFunc[func])
    b.emit(Opcode.DMA_COPY, o, [s])
    b.emit(Opcode.DMA_COPY, o2, [y])
    b.emit(Opcode.DMA_COPY, orr, [r])
    _assert_executors_agree(b, seed=7)


@pytest.mark.parametrize("op", ["add", "maximum", "minimum", "multiply"])
@pytest.mark.parametrize("negate", [False, True])
def test_tensor_reduce_folds(op, negate):
    """tensor_reduce over the last axis of a [P, 3, 20] view (three groups per partition) and over
    all free dims, on raw bits (-0.0 vs +0.0 order, NaN, infinities)."""
    from neuronsim.sim import AluOp, Engine
    b = ProgramBuilder("reduce")
    a = b.hbm("a", (64, 60), "float32")
    s = b.sbuf("s", (64, 60), "float32")
    r3, r1 = b.sbuf("r3", (64, 3), "float32"), b.sbuf("r1", (64, 1), "float32")
    o3, o1 = b.hbm("o3", (64, 3), "float32", kind="output"), b.hbm("o1", (64, 1), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.TENSOR_REDUCE, r3, [s.ap([[60, 64], [20, 3], [1, 20]])], engine=Engine.VECTOR,
           op=AluOp[op], num_axes=1, negate=negate)
    b.emit(Opcode.TENSOR_REDUCE, r1, [s.ap([[60, 64], [20, 3], [1, 20]])], engine=Engine.VECTOR,
           op=AluOp[op], num_axes=2, negate=negate)
    b.emit(Opcode.DMA_COPY, o3, [r3])
    b.emit(Opcode.DMA_COPY, o1, [r1])
    _assert_executors_agree(b, seed=4)


@pytest.mark.parametrize("layout", ["side_by_side", "in_place", "overlapping"])
def test_fused_vector_paths(layout):
    """tensor_tensor / tensor_scalar / scalar_tensor_tensor on fp32 tiles that sit side by side in
    the same partitions (disjoint by columns: the one-pass path), in place, and overlapping by a
    few columns (the buffered path), for the specialised operator pairs and a generic one."""
    from neuronsim.sim import AluOp, Engine
    b = ProgramBuilder("fused")
    a = b.hbm("a", (128, 160), "float32")
    t = b.hbm("t", (128, 1), "float32")
    s, st = b.sbuf("s", (128, 160), "float32"), b.sbuf("st", (128, 1), "float32")
    o = b.hbm("o", (128, 160), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.DMA_COPY, st, [t])
    x = s.ap([[160, 128], [1, 40]])
    dst = {"side_by_side": s.ap([[160, 128], [1, 40]], offset=48), "in_place": x,
           "overlapping": s.ap([[160, 128], [1, 40]], offset=3)}[layout]
    y = s.ap([[160, 128], [1, 40]], offset=100)
    vec = Engine.VECTOR
    for op in (AluOp.add, AluOp.multiply, AluOp.maximum):
        b.emit(Opcode.TENSOR_TENSOR, dst, [x, y], engine=vec, op=op)
    for op0, op1 in ((AluOp.multiply, None), (AluOp.add, None), (AluOp.multiply, AluOp.add),
                     (AluOp.add, AluOp.multiply), (AluOp.subtract, AluOp.multiply),
                     (AluOp.divide, AluOp.maximum)):
        imm = {"op1": op1, "operand1": 0.5} if op1 is not None else {}
        b.emit(Opcode.TENSOR_SCALAR, dst, [x, st], engine=vec, op0=op0, operand0_is_tile=True,
               reverse0=True, **imm)
    for op0, op1 in ((AluOp.multiply, AluOp.add), (AluOp.multiply, AluOp.multiply),
                     (AluOp.subtract, AluOp.multiply), (AluOp.divide, AluOp.subtract)):
        b.emit(Opcode.SCALAR_TENSOR_TENSOR, dst, [x, st, y], engine=vec, op0=op0, operand0_is_tile=True,
               op1=op1, reverse1=True)
    b.emit(Opcode.DMA_COPY, o, [s])
    _assert_executors_agree(b, seed=5)


def test_fused_division_is_alu_divide():
    """The vectorized divisions (tensor_scalar ``x / s``, scalar_tensor_tensor ``(x * s) / y`` as
    addcdiv issues it) against the reference's ALU divide on dividends and divisors that are
    +-0, +-inf, NaN, subnormal or huge: x / +-0 = +-inf by the signs, 0 / 0 and NaN give NaN."""
    from neuronsim.sim import AluOp, Engine
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3e38, -1.0, 2.5],
                        np.float32)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((128, 96)).astype(np.float32)
    y = rng.standard_normal((128, 96)).astype(np.float32)
    x[:, :10], y[:, 10:20] = specials, specials
    x[:, 20:30], y[:, 20:30] = specials, specials[::-1]
    col = rng.standard_normal((128, 1)).astype(np.float32)
    col[:10, 0] = specials
    b = ProgramBuilder("divide")
    tile, column = (128, 96), (128, 1)
    hx, hy, hc = b.hbm("x", tile, "float32"), b.hbm("y", tile, "float32"), b.hbm("c", column, "float32")
    sx, sy, sc = b.sbuf("sx", tile, "float32"), b.sbuf("sy", tile, "float32"), b.sbuf("sc", column, "float32")
    d1, d2 = b.sbuf("d1", tile, "float32"), b.sbuf("d2", tile, "float32")
    o1, o2 = b.hbm("o1", tile, "float32", kind="output"), b.hbm("o2", tile, "float32", kind="output")
    for dst, src in ((sx, hx), (sy, hy), (sc, hc)):
        b.emit(Opcode.DMA_COPY, dst, [src])
    vec = Engine.VECTOR
    b.emit(Opcode.TENSOR_SCALAR, d1, [sx, sc], engine=vec, op0=AluOp.divide, operand0_is_tile=True)
    b.emit(Opcode.SCALAR_TENSOR_TENSOR, d2, [sx, sc, sy], engine=vec, op0=AluOp.multiply,
           operand0_is_tile=True, op1=AluOp.divide)
    b.emit(Opcode.DMA_COPY, o1, [d1])
    b.emit(Opcode.DMA_COPY, o2, [d2])
    program = b.build()
    out = {e: sim.run(program, {"x": x, "y": y, "c": col}, "trn2", executor=e).outputs
           for e in ("reference", "numba")}
    for name in ("o1", "o2"):
        np.testing.assert_array_equal(_bits(out["numba"][name]), _bits(out["reference"][name]), err_msg=name)
    with np.errstate(all="ignore"):
        want = (x * col) / y
    got = out["numba"]["o2"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@pytest.mark.parametrize("op", ["add", "maximum", "minimum"])
def test_tensor_reduce_folds_partial_and_strided(op):
    """The eight-partitions-abreast folds on 13 partitions (one block of eight, then five one by
    one), reading plain rows in place and a strided view (every other column: gathered first),
    on raw bits (NaN payloads, -0.0 vs +0.0 order, infinities)."""
    from neuronsim.sim import AluOp, Engine
    b = ProgramBuilder("reduce_partial")
    a = b.hbm("a", (13, 66), "float32")
    s = b.sbuf("s", (13, 66), "float32")
    plain, strided = b.sbuf("plain", (13, 3), "float32"), b.sbuf("strided", (13, 1), "float32")
    o1, o2 = b.hbm("o1", (13, 3), "float32", kind="output"), b.hbm("o2", (13, 1), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.TENSOR_REDUCE, plain, [s.ap([[66, 13], [22, 3], [1, 22]])], engine=Engine.VECTOR,
           op=AluOp[op], num_axes=1)
    b.emit(Opcode.TENSOR_REDUCE, strided, [s.ap([[66, 13], [2, 33]], offset=1)], engine=Engine.VECTOR,
           op=AluOp[op], num_axes=1)
    b.emit(Opcode.DMA_COPY, o1, [plain])
    b.emit(Opcode.DMA_COPY, o2, [strided])
    _assert_executors_agree(b, seed=11)


@pytest.mark.parametrize("pred_dtype", ["uint8", "bool_", "int16", "uint32"])
@pytest.mark.parametrize("layout", ["disjoint", "in_place", "overlapping"])
def test_select_rows(pred_dtype, layout):
    """Raw 4-byte select written row by row (rows of 80, above _MIN_ROW_ELEMENTS): on_true
    broadcast along the free dim (step 0) and strided, on_false plain, on 77 partitions; dst
    disjoint from the sources, the very elements of on_false (in place), or overlapping it by a
    few columns (the buffered path). Random bits carry NaN payloads, which a raw select keeps."""
    from neuronsim.sim import Engine
    b = ProgramBuilder("select_rows")
    a = b.hbm("a", (77, 320), "float32")
    pr = b.hbm("pr", (77, 80), pred_dtype)
    s, sp = b.sbuf("s", (77, 320), "float32"), b.sbuf("sp", (77, 80), pred_dtype)
    o = b.hbm("o", (77, 320), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.DMA_COPY, sp, [pr])
    pred = sp.ap([[80, 77], [1, 80]])
    broadcast = s.ap([[320, 77], [0, 80]], offset=319)
    strided = s.ap([[320, 77], [3, 40], [1, 2]], offset=160)
    on_false = s.ap([[320, 77], [1, 80]])
    dst = {"disjoint": s.ap([[320, 77], [1, 80]], offset=80), "in_place": on_false,
           "overlapping": s.ap([[320, 77], [1, 80]], offset=5)}[layout]
    b.emit(Opcode.SELECT, dst, [pred, broadcast, on_false], engine=Engine.VECTOR)
    b.emit(Opcode.SELECT, dst, [pred, strided, on_false], engine=Engine.VECTOR)
    b.emit(Opcode.DMA_COPY, o, [s])
    _assert_executors_agree(b, seed=12)


@pytest.mark.parametrize("func", ["identity", "copy"])
@pytest.mark.parametrize("layout", ["side_by_side", "in_place", "strided"])
def test_activation_affine_rows(func, layout):
    """copy / identity between plain fp32 rows in one pass (scale and bias tiles, reduce), into
    a tile beside the source in the same partitions, in place, and from a strided view (the
    buffered path), on 77 partitions of raw bits (NaN payloads, -0.0, subnormals, infinities)."""
    from neuronsim.sim import ActFunc, Engine
    b = ProgramBuilder("act_affine")
    a, t = b.hbm("a", (77, 100), "float32"), b.hbm("t", (77, 2), "float32")
    s, st = b.sbuf("s", (77, 100), "float32"), b.sbuf("st", (77, 2), "float32")
    r = b.sbuf("r", (77, 1), "float32")
    o, orr = b.hbm("o", (77, 100), "float32", kind="output"), b.hbm("or", (77, 1), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.DMA_COPY, st, [t])
    src = s.ap([[100, 77], [2, 30]]) if layout == "strided" else s.ap([[100, 77], [1, 30]])
    dst = s.ap([[100, 77], [1, 30]]) if layout == "in_place" else s.ap([[100, 77], [1, 30]], offset=64)
    b.emit(Opcode.ACTIVATION, dst, [src, st.ap([[2, 77], [1, 1]]), st.ap([[2, 77], [1, 1]], offset=1)],
           engine=Engine.SCALAR, dst2=r, func=ActFunc[func], bias_is_tile=True, scale_is_tile=True,
           reduce=True)
    b.emit(Opcode.ACTIVATION, dst, [src], engine=Engine.SCALAR, func=ActFunc[func], scale=-0.75, bias=0.5)
    b.emit(Opcode.DMA_COPY, o, [s])
    b.emit(Opcode.DMA_COPY, orr, [r])
    _assert_executors_agree(b, seed=13)


@pytest.mark.parametrize("n", [1, 2, 7, 9, 15, 64])
def test_bn_stats_eight_abreast(n):
    """bn_stats with eight partitions side by side on 13 partitions (one block, five alone), odd
    and tiny free sizes (n = 1: an empty odd half), reading plain rows in place and a strided
    view (gathered), on raw bits (NaN payloads, infinities, -0.0, subnormals). The short rows
    show order mistakes best: in long ones the random huge values overflow most sums to inf."""
    from neuronsim.sim import Engine
    b = ProgramBuilder("bn_stats8")
    a = b.hbm("a", (13, 2 * n), "float32")
    s = b.sbuf("s", (13, 2 * n), "float32")
    plain, strided = b.sbuf("plain", (13, 6), "float32"), b.sbuf("strided", (13, 6), "float32")
    o1, o2 = b.hbm("o1", (13, 6), "float32", kind="output"), b.hbm("o2", (13, 6), "float32", kind="output")
    b.emit(Opcode.DMA_COPY, s, [a])
    b.emit(Opcode.BN_STATS, plain, [s.ap([[2 * n, 13], [1, n]])], engine=Engine.VECTOR)
    b.emit(Opcode.BN_STATS, strided, [s.ap([[2 * n, 13], [2, n]], offset=1)], engine=Engine.VECTOR)
    b.emit(Opcode.DMA_COPY, o1, [plain])
    b.emit(Opcode.DMA_COPY, o2, [strided])
    _assert_executors_agree(b, seed=14)
