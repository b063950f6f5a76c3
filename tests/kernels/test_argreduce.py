"""max.dim / min.dim / argmax / argmin (int64 index results) against ATen-CPU, bit for bit.

Both layouts (rows: kept elements on the partitions; spread: a long reduction onto few outputs) and
the chunked long rows are exercised with ties (small integers stored as float), NaN, +-inf, -0.0,
rows shorter than max8's 8, partial tiles, keepdim, negative dims, non-contiguous views, fp32/bf16
and small integer dtypes.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, ran_natively

import neuronsim.kernels.argreduce as argreduce
from neuronsim.device import native

aten = torch.ops.aten


def _x(shape, dtype=torch.float32, seed=0, ties=False):
    torch.manual_seed(seed)
    x = torch.randint(-3, 4, shape).float() if ties else torch.randn(shape) * 2
    return x.to(dtype)


def _same(got, want):
    assert got.device.type == "neuron"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    assert torch.equal(got, want) or (got.dtype.is_floating_point and torch.equal(got.isnan(), want.isnan())
                                      and torch.equal(got.nan_to_num(), want.nan_to_num())), (got, want)
    if got.dtype.is_floating_point:  # -0.0 vs 0.0: ATen returns the element at the index
        assert torch.equal(torch.signbit(got), torch.signbit(want))


def _check(fn, x, *natives):
    torch.neuron.clear_op_tracking()
    got = fn(x.to("neuron") if isinstance(x, torch.Tensor) else x)
    want = fn(x)
    for name in natives:
        assert ran_natively(name), torch.neuron.get_executed_ops()
    assert torch.neuron.get_fallback_ops() == []
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def _all_four(x, dim, keepdim=False):
    _check(lambda t: torch.max(t, dim, keepdim), x, "aten::max.dim")
    _check(lambda t: torch.min(t, dim, keepdim), x, "aten::min.dim")
    _check(lambda t: t.argmax(dim, keepdim), x, "aten::argmax")
    _check(lambda t: t.argmin(dim, keepdim), x, "aten::argmin")


def _scheme(x, dim):
    xm = x.to("meta")
    out = xm.argmax() if dim is None else xm.argmax(dim)
    return argreduce.plan_layout(xm, out, dim, False, False, False).scheme


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize(("shape", "dim", "scheme"), [
    ((64, 768), -1, "rows"),
    ((300, 37), 1, "rows"),  # a partial tile of rows
    ((300, 37), 0, "rows"),  # an outer reduced dim: a strided DMA walks it
    ((4, 5, 6), 1, "rows"),
    ((2, 50_000), 1, "spread"),
    ((100_000,), None, "spread"),
    ((3, 7), None, "rows"),
    ((64, 4096), 1, "spread"),  # 64 segments of 32 per partition: one load
    ((128, 4096), 1, "rows"),  # the partitions are full already
    ((130, 3000), 1, "spread"),  # a second, partial group of kept elements
])
def test_layout_choice(shape, dim, scheme):
    assert _scheme(torch.empty(shape), dim) == scheme


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dim"), [
    ((64, 768), -1), ((300, 37), 1), ((300, 37), 0), ((4, 5, 6), 1), ((4, 5, 6), -3), ((130, 3), 1),
    ((5,), 0),
])
def test_matches_cpu(shape, dim, dtype):
    _all_four(_x(shape, dtype), dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dim"), [((40, 300), 1), ((300, 40), 0), ((20, 5), 1)])
def test_ties_give_the_first_index(shape, dim, dtype):
    _all_four(_x(shape, dtype, ties=True), dim)


def test_keepdim_and_negative_dims():
    x = _x((6, 7, 9), seed=1)
    for dim in (0, 1, 2, -1, -2):
        _all_four(x, dim, keepdim=True)


def test_long_rows_are_chunked():
    # past CHUNK: per-chunk maxima combined; the maximum in a later chunk, ties across chunks
    n = 2 * argreduce.CHUNK + 5
    x = _x((3, n), ties=True, seed=2)
    x[0, n - 1] = 10.0  # in the short last chunk
    x[1, argreduce.CHUNK + 3] = 10.0
    x[1, 2 * argreduce.CHUNK + 1] = 10.0  # a later tie: the first wins
    _all_four(x, 1)
    _all_four(_x((3, n), torch.bfloat16, seed=3), -1)


def test_spread_matches_cpu():
    x = _x((2, 50_000), seed=4, ties=True)
    _all_four(x, 1)
    y = _x((100_003,), seed=5)  # a short last segment
    y[100_001] = 50.0
    y[7] = -50.0
    _check(lambda t: t.argmax(), y, "aten::argmax")
    _check(lambda t: t.argmin(), y, "aten::argmin")
    _check(lambda t: torch.max(t, 0), y, "aten::max.dim")


@pytest.mark.parametrize("dtype", DTYPES)
def test_spread_of_many_kept_elements(dtype):
    _all_four(_x((32, 2048), dtype, seed=14, ties=True), 1)
    x = _x((130, 3001), dtype, seed=15)  # two groups, a short last segment
    x[129, 3000] = 100
    x[128, 0] = float("nan")
    x[3, 2999] = float("-inf")
    _all_four(x, -1)
    _all_four(x.t(), 0)  # the kept elements are the innermost: partitions walk them with a stride


def test_spread_over_an_outer_dim():
    _all_four(_x((5000, 4), seed=16, ties=True), 0)  # the reduced elements 4 apart


def test_spread_with_chunked_segments(monkeypatch):
    # segments longer than a chunk (rows of more than 128 * CHUNK): a small CHUNK makes them cheap
    monkeypatch.setattr(argreduce, "CHUNK", 64)
    names = ("aten::max.dim", "aten::min.dim", "aten::argmax.default", "aten::argmin.default")
    for name in names:
        native.entries(name).clear()
    try:
        x = _x((3, 20_011), seed=17, ties=True)
        assert _scheme(x, 1) == "spread"
        x[2, 20_010] = 9
        x[1, 150] = float("nan")
        _all_four(x, 1)
    finally:
        for name in names:
            native.entries(name).clear()  # the next tests trace with the real CHUNK


def test_float16():
    x = _x((70, 300), torch.float16, seed=18, ties=True)
    _all_four(x, 1)
    _all_four(x, 0)
    _check(lambda t: t.argmax(), _x((5000,), torch.float16, seed=19), "aten::argmax")


@pytest.mark.parametrize("dtype", DTYPES)
def test_flattened_argmax(dtype):
    x = _x((37, 41), dtype, seed=6)
    _check(lambda t: t.argmax(), x, "aten::argmax")
    _check(lambda t: t.argmax(keepdim=True), x, "aten::argmax")
    _check(lambda t: t.argmin(), x, "aten::argmin")
    _check(lambda t: t[3:20].argmin(), x, "aten::argmin")  # an offset view, contiguous rows


def test_nan_propagates_with_its_first_index():
    x = _x((6, 40), seed=7)
    x[1, 5] = float("nan")
    x[1, 20] = float("nan")
    x[2, 39] = float("nan")
    x[3, :] = float("nan")
    x[4, :] = float("-inf")
    x[5, :] = float("inf")
    x[0, 3] = float("inf")
    _all_four(x, 1)
    _all_four(x.t(), 0)
    y = _x((3, 2 * argreduce.CHUNK + 1), seed=8)
    y[0, argreduce.CHUNK + 2] = float("nan")  # a NaN in a later chunk beats a larger number
    y[0, 5] = 1e30
    y[2, -1] = float("nan")
    _all_four(y, 1)
    z = _x((60_000,), seed=9)
    z[40_000] = float("nan")
    _check(lambda t: t.argmax(), z, "aten::argmax")
    _check(lambda t: t.argmin(), z, "aten::argmin")


def test_signed_zeros_compare_equal():
    x = torch.tensor([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0], [1.0, -0.0, 0.0], [1.0, 0.0, -0.0]])
    _all_four(x, 1)
    _all_four(torch.tensor([[-0.0] * 9, [0.0] * 9]), 1)


def test_short_rows_are_padded():
    for n in (1, 2, 7, 8, 9):
        x = _x((5, n), seed=n)
        x[0] = float("-inf")  # the padding is -inf too: a real element must still win
        _all_four(x, 1)


def test_non_contiguous_views():
    base = _x((12, 40, 10), seed=10, ties=True)
    _all_four(base[:, ::3, 2], 1)
    _all_four(base.permute(2, 0, 1), 2)
    _all_four(base.transpose(0, 1)[5:30], 0)
    _all_four(_x((8, 1), seed=11).expand(8, 50), 1)  # stride 0: all ties


def test_non_coalescing_flat_argmax_falls_back():
    x = _x((12, 10), seed=12).t()  # the flat (logical) order is not one walk of memory
    torch.neuron.clear_op_tracking()
    _same(x.to("neuron").argmax(), x.argmax())
    assert "aten::argmax" in torch.neuron.get_fallback_ops()


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_small_integers(dtype):
    torch.manual_seed(13)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-128, 127)
    x = torch.randint(lo, hi, (50, 33)).to(dtype)
    x[0, :] = lo  # min of the dtype, negated for argmin: -(-128) = 128 is exact in fp32
    _all_four(x, 1)
    _all_four(x, 0)


def test_int32_below_2_to_the_24_is_native_and_larger_values_fall_back():
    x = torch.randint(-5, 5, (4, 9), dtype=torch.int32)
    x[:, 3] = 4  # ties: the first index wins
    _all_four(x, 1)
    big = torch.tensor([[2**24 + 1, 2**24, 3]], dtype=torch.int32)
    torch.neuron.clear_op_tracking()
    assert torch.equal(big.to("neuron").argmax(1).cpu(), big.argmax(1))
    assert "aten::argmax" in torch.neuron.get_fallback_ops()


def test_int64_and_bool_fall_back():
    for x in (torch.randint(0, 2, (4, 9)).bool(), torch.randint(-5, 5, (4, 9))):
        torch.neuron.clear_op_tracking()
        v, i = torch.max(x.to("neuron"), 1)
        w, j = torch.max(x, 1)
        _same(v, w)
        _same(i, j)
        assert "aten::max.dim" in torch.neuron.get_fallback_ops()


def test_uncovered_signatures_fall_back():
    xm = torch.empty(argreduce.MAX_INDEX, device="meta")  # indices past fp32's exact integers
    assert argreduce.plan_layout(xm, xm.argmax(), 0, False, False, False) is None
    x = _x((6, 20), seed=20, ties=True)
    torch.neuron.clear_op_tracking()
    v, i = torch.topk(x.to("neuron"), 3)  # ties among the top k: find_index8 would repeat an index
    w, j = torch.topk(x, 3)
    _same(v, w)
    assert torch.equal(x.gather(1, i.cpu()), w) and all(len(set(r.tolist())) == 3 for r in i.cpu())
    assert "aten::topk" in torch.neuron.get_fallback_ops()


def test_invalid_arguments_raise_torchs_error():
    x = _x((3, 4)).to("neuron")
    with pytest.raises(IndexError):
        x.argmax(2)
    with pytest.raises(IndexError):
        torch.max(x, -3)
    with pytest.raises((IndexError, RuntimeError)):
        torch.empty(0, 3, device="neuron").argmax(0)


def test_zero_dim_and_size_one():
    _check(lambda t: t.argmax(), torch.tensor(3.5), "aten::argmax")
    _check(lambda t: torch.max(t, 0), torch.tensor(3.5), "aten::max.dim")
    _all_four(_x((1, 1)), 0)
    _all_four(_x((7, 1)), 1)


def _native_ns(name: str) -> float:
    (entry,) = [e for e in native.entries(name).values() if not native.is_declined(e)]
    return entry.prepared.timeline.total_ns


def test_simulated_time_scales_with_bytes():
    def time_of(shape):
        native.entries("aten::argmax.default").clear()
        _x(shape).to("neuron").argmax(-1)
        return _native_ns("aten::argmax.default")

    small, big = time_of((256, 1024)), time_of((2048, 1024))
    assert 3 < big / small < 12, (small, big)


def test_spread_is_faster_than_one_partition():
    native.entries("aten::argmax.default").clear()
    _x((1, 60_000)).to("neuron").argmax(-1)
    spread = _native_ns("aten::argmax.default")
    native.entries("aten::argmax.default").clear()
    old = argreduce.SPREAD_OVERHEAD
    argreduce.SPREAD_OVERHEAD = 10**9  # rows: one partition
    try:
        _x((1, 60_000)).to("neuron").argmax(-1)
        rows = _native_ns("aten::argmax.default")
    finally:
        argreduce.SPREAD_OVERHEAD = old
        native.entries("aten::argmax.default").clear()
    assert spread * 4 < rows, (spread, rows)


def test_module_docstring_names_every_layout():
    for scheme in ("rows", "spread"):
        assert f"``{scheme}``" in argreduce.__doc__
