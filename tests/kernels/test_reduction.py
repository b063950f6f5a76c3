"""Reductions (sum, mean, amax/amin, max/min, prod, var/std/var_mean, vector norms) against ATen-CPU.

Each layout of the kernel (rows: reduced dims innermost; columns: kept dim innermost; spread: a long
reduction onto few outputs) is exercised with partial tiles, non-contiguous and expanded inputs,
keepdim, negative dims, fp32/bf16 and NaN/inf. Sums run in another order than ATen's, so their
tolerance grows with sqrt(n).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively, tolerance

import neuronsim.kernels.reduction as reduction
from neuronsim.device import native
from neuronsim.kernels.reduction import Reduction, plan_layout
from neuronsim.sim.ir import AluOp

aten = torch.ops.aten


def _x(shape, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return (torch.randn(shape) * 2 + 0.5).to(dtype)


def _sum_tol(dtype, n: int) -> dict:
    """Sums of n values of ~2 in another order: errors grow like sqrt(n) ulps of the partial sums."""
    if dtype == torch.float32:
        return {"rtol": 2e-5, "atol": 4e-6 * math.sqrt(n)}
    return {"rtol": 2**-6, "atol": 2**-6 * math.sqrt(n)}


def _check(fn, x, native: str, **tol):
    """``fn`` on the device matches ``fn`` on the CPU, and ran as the native kernel ``native``."""
    torch.neuron.clear_op_tracking()
    got = fn(x.to("neuron") if isinstance(x, torch.Tensor) else x)
    want = fn(x)
    assert ran_natively(native), torch.neuron.get_executed_ops()
    assert torch.neuron.get_fallback_ops() == []
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    for g, w in pairs:
        assert_matches_cpu(g, w, **(tol or tolerance(w.dtype)))


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize(("shape", "dims", "scheme"), [
    ((64, 768), [-1], "rows"),
    ((64, 768), [0], "columns"),  # a bias gradient: [N, C] -> [C]
    ((4, 16, 768), [0, 1], "columns"),
    ((4, 16, 768), [2], "rows"),
    ((300, 20), [0], "rows"),  # a narrow kept dim: its reduced elements walk with a stride
    ((64, 768), [0, 1], "spread"),
    ((3, 5, 3, 300), [2], "columns"),  # an outer kept dim: looped
    ((2, 50000), [1], "spread"),
])
def test_layout_choice(shape, dims, scheme):
    x = torch.empty(shape)
    out = x.sum(dims)
    assert plan_layout(x, out, dims, False, Reduction(AluOp.add)).scheme == scheme


def test_partitions_walk_the_longest_dim():
    """A transposed input whose innermost kept dim is short still fills the partitions."""
    x = torch.empty(300, 3, 5, 3).transpose(0, -1)  # kept (3, 5, 300) after reducing dim 1
    layout = plan_layout(x, torch.empty(3, 5, 300), [1], False, Reduction(AluOp.add, var=True))
    assert layout.scheme == "rows" and layout.kept[-1][0] == 300
    _check(lambda t: torch.std(t, [1], correction=0), x.normal_(), "aten::std.correction")


# ---------------------------------------------------------------- sum and mean

SUM_CASES = [
    ((64, 768), [0]),  # columns
    ((300, 130), [0]),  # columns: 3 row tiles, the last partial; 2 column blocks
    ((3, 200, 40), [1]),  # columns with an outer kept dim
    ((200, 2100), [0]),  # columns: free blocks of 2048 + 52
    ((6, 100, 96), [-1]),  # rows: 600 rows
    ((5, 7, 9), [0, 2]),  # rows: the reduced dims do not coalesce
    ((130, 9000), [1]),  # rows: reduced elements in chunks
    ((300, 20), [0]),  # rows with a strided free dim
    ((2, 3, 40000), [-1]),  # spread
    ((70, 50, 3), [0, 1, 2]),  # spread over every dim
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dims"), SUM_CASES)
def test_sum_matches_cpu(shape, dims, dtype):
    x = _x(shape, dtype)
    n = math.prod(shape[d] for d in dims)
    _check(lambda t: t.sum(dims), x, "aten::sum.dim_IntList", **_sum_tol(dtype, n))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dims"), SUM_CASES[::3])
def test_mean_matches_cpu_keepdim(shape, dims, dtype):
    x = _x(shape, dtype)
    _check(lambda t: t.mean(dims, keepdim=True), x, "aten::mean.dim")


@pytest.mark.parametrize("dtype", DTYPES)
def test_full_sum_and_mean(dtype):
    x = _x((257, 129), dtype)
    # sum.default / mean.default reach the device as their dim overloads over every dim
    _check(lambda t: aten.sum.default(t), x, "aten::sum.dim_IntList", **_sum_tol(dtype, x.numel()))
    _check(lambda t: aten.mean.default(t), x, "aten::mean.dim")


def test_sum_of_views():
    base = _x((40, 96, 10))
    cases = [
        lambda t: t.transpose(0, 2).sum(1),  # transposed
        lambda t: t[:, ::3, 1:].sum(-1),  # strided slice
        lambda t: t[:, :1].expand(40, 50, 10).sum(1),  # expanded: a stride-0 reduced dim
        lambda t: t[:1].expand(30, 96, 10).sum([0, 2]),  # expanded outer dim
        lambda t: t.permute(2, 0, 1).sum([-1, -3]),
        lambda t: t[:, ::2].sum(),  # spread over reduced dims that do not coalesce
    ]
    for fn in cases:
        _check(fn, base, "aten::sum.dim_IntList", **_sum_tol(torch.float32, 3000))
    _check(lambda t: t[::3, :, 2:].mean([0, 1]), base, "aten::mean.dim")


def test_sum_dtype_argument_and_small_cases():
    x = _x((33, 65), torch.bfloat16)
    _check(lambda t: t.sum(0, dtype=torch.float32), x, "aten::sum.dim_IntList", rtol=1e-5, atol=1e-4)
    _check(lambda t: t.mean(1, dtype=torch.float32), x, "aten::mean.dim", rtol=1e-5, atol=1e-5)
    h = _x((130, 65), torch.float16)
    _check(lambda t: t.sum(0), h, "aten::sum.dim_IntList", rtol=2**-9, atol=2**-6)
    _check(lambda t: torch.var(t, 1), h, "aten::var.correction", rtol=2**-9, atol=2**-9)
    _check(lambda t: t.sum(0), torch.tensor(3.5), "aten::sum.dim_IntList")  # 0-dim
    _check(lambda t: t.sum(1), _x((5, 1, 3)), "aten::sum.dim_IntList")  # a size-1 reduced dim
    _check(lambda t: t.sum([]), _x((4, 6)), "aten::sum.dim_IntList")  # [] reduces all dims


def test_sum_with_nan_and_inf():
    x = _x((130, 200))
    x[3, 5] = math.nan
    x[7, :] = math.inf
    x[9, 0], x[9, 1] = math.inf, -math.inf
    _check(lambda t: t.sum(0), x, "aten::sum.dim_IntList", equal_nan=True, rtol=1e-5, atol=1e-3)
    _check(lambda t: t.sum(1), x, "aten::sum.dim_IntList", equal_nan=True, rtol=1e-5, atol=1e-3)


def test_int_reductions_run_exactly_on_gpsimd():  # (tests/kernels/test_int_reduction.py has the details)
    x = torch.randint(-100, 100, (20, 30), dtype=torch.int32)
    torch.neuron.clear_op_tracking()
    assert torch.equal(x.to("neuron").sum(0).cpu(), x.sum(0))  # an int64 result, exact
    assert torch.neuron.get_fallback_ops() == []
    # (max.dim and the other index reductions are argreduce.py's: tests/kernels/test_argreduce.py)


def test_invalid_dims_raise_torchs_error():
    x = _x((3, 4)).to("neuron")
    with pytest.raises(IndexError):
        x.sum(2)
    with pytest.raises(RuntimeError):
        x.sum([0, 0])


def test_bias_gradient_is_native():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 200).to("neuron")
    x = torch.randn(4, 16, 96, device="neuron")
    torch.neuron.clear_op_tracking()
    lin(x).square().sum().backward()
    assert ran_natively("aten::sum.dim_IntList")
    assert "aten::sum.dim_IntList" not in torch.neuron.get_fallback_ops()
    ref = torch.nn.Linear(96, 200)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    ref(x.cpu()).square().sum().backward()
    assert_matches_cpu(lin.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-3)


def _native_ns(name: str) -> float:
    (entry,) = [e for e in native.entries(name).values() if not native.is_declined(e)]
    return entry.prepared.timeline.total_ns


def test_simulated_time_scales_with_bytes():
    def time_of(shape, dims):
        native.entries("aten::sum.dim_IntList").clear()
        _x(shape).to("neuron").sum(dims)
        return _native_ns("aten::sum.dim_IntList")

    for dims in ([0], [1]):
        small, big = time_of((256, 1024), dims), time_of((2048, 1024), dims)
        assert 2.5 < big / small < 12, (dims, small, big)  # 8x the bytes; DMA latencies do not scale


# ---------------------------------------------------------------- max, min, prod


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dims"), [((300, 130), [0]), ((3, 200, 40), [1]), ((6, 100, 96), [-1]),
                                             ((2, 3, 40000), [-1]), ((5, 7, 9), [0, 2])])
def test_amax_amin_match_cpu(shape, dims, dtype):
    x = _x(shape, dtype)
    _check(lambda t: t.amax(dims), x, "aten::amax", rtol=0, atol=0)
    _check(lambda t: t.amin(dims, keepdim=True), x, "aten::amin", rtol=0, atol=0)


def test_max_min_propagate_nan_and_inf():
    x = _x((140, 260))
    x[10, 3] = math.nan
    x[20, 7] = math.inf
    x[30, 9] = -math.inf
    for dims in ([0], [1], [0, 1]):
        _check(lambda t, d=dims: t.amax(d), x, "aten::amax", rtol=0, atol=0, equal_nan=True)
        _check(lambda t, d=dims: t.amin(d), x, "aten::amin", rtol=0, atol=0, equal_nan=True)
    _check(lambda t: t.max(), x, "aten::max", rtol=0, atol=0, equal_nan=True)
    y = x.clone()
    y[10, 3] = 0.0
    _check(lambda t: t.max(), y, "aten::max", rtol=0, atol=0)
    _check(lambda t: t.min(), y, "aten::min", rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_extremes_of_one_sign_over_partial_tiles(dtype):
    """Spread tiles that leave partitions empty: those hold the fold's identity (-inf, +inf, 1), not 0."""
    torch.manual_seed(0)
    pos = (torch.rand(3, 40001) + 0.5).to(dtype)  # 312 x 128 + 65 elements: a [1, 65] tail tile
    _check(lambda t: t.amin(1), pos, "aten::amin", rtol=0, atol=0)
    _check(lambda t: t.amax(1), -pos, "aten::amax", rtol=0, atol=0)
    _check(lambda t: torch.linalg.vector_norm(t, -math.inf, 1), pos, "aten::linalg_vector_norm",
           rtol=0, atol=0)
    got = pos[0, :300].to("neuron").prod()  # ATen rounds a bf16 prod's partial products: compare in fp32
    assert ran_natively("aten::prod")
    assert_matches_cpu(got, pos[0, :300].float().prod().to(dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_prod_matches_cpu(dtype):
    torch.manual_seed(0)
    x = (torch.rand(150, 40) + 0.5).to(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-7} if dtype == torch.float32 else tolerance(dtype)
    # ATen-CPU rounds every partial product of a bf16 prod to bf16; the kernel keeps fp32 and
    # rounds once, so bf16 results are compared with the fp32 product, rounded.
    for fn, op_name in [(lambda t: t.prod(1), "aten::prod.dim_int"),
                       (lambda t: t.prod(0, keepdim=True), "aten::prod.dim_int"),
                       (lambda t: t[:3, :30].prod(), "aten::prod")]:
        torch.neuron.clear_op_tracking()
        got = fn(x.to("neuron"))
        assert ran_natively(op_name) and torch.neuron.get_fallback_ops() == []
        assert_matches_cpu(got, fn(x.float()).to(dtype), **tol)


# ---------------------------------------------------------------- variance and norms

VAR_CASES = [((64, 768), [-1]), ((300, 70), [0]), ((2, 50000), [1]), ((40, 6, 33), [0, 2]), ((9, 11), None)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dims"), VAR_CASES)
def test_var_std_var_mean_match_cpu(shape, dims, dtype):
    x = _x(shape, dtype) + 100  # a large mean: a one-pass sum of squares would lose the variance
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    _check(lambda t: torch.var(t, dims), x, "aten::var.correction", **tol)
    _check(lambda t: torch.std(t, dims, correction=0, keepdim=True), x, "aten::std.correction", **tol)
    _check(lambda t: torch.var_mean(t, dims, correction=2.5), x, "aten::var_mean.correction", **tol)


@pytest.mark.filterwarnings("ignore::UserWarning")  # ATen warns of degrees of freedom <= 0
def test_var_edge_corrections():
    x = _x((5, 4))
    _check(lambda t: torch.var(t, 1, correction=4), x, "aten::var.correction")  # divisor 0: inf
    _check(lambda t: torch.var(t, 1, correction=9), x, "aten::var.correction")  # clamped at 0
    _check(lambda t: torch.var(t[:, :1], 1), x, "aten::var.correction", equal_nan=True)  # 0 / 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ord_", [2, 1, math.inf, -math.inf])
@pytest.mark.parametrize(("shape", "dims"), [((64, 768), [-1]), ((300, 70), [0]), ((2, 40000), None)])
def test_vector_norm_matches_cpu(shape, dims, ord_, dtype):
    x = _x(shape, dtype)
    tol = _sum_tol(dtype, 1) if ord_ in (2, 1) else {"rtol": 0, "atol": 0}
    _check(lambda t: torch.linalg.vector_norm(t, ord_, dims), x, "aten::linalg_vector_norm", **tol)


def test_other_norm_orders_fall_back():
    x = _x((10, 20))
    torch.neuron.clear_op_tracking()
    got = torch.linalg.vector_norm(x.to("neuron"), 3, 1)
    assert not ran_natively("aten::linalg_vector_norm")
    assert_matches_cpu(got, torch.linalg.vector_norm(x, 3, 1))


def test_rms_norm_decomposition_is_native():
    # a non-contiguous input is not routed to the fused rms_norm kernel: it decomposes (mean.dim & co.)
    x = _x((16, 4, 96))
    _check(lambda t: F.rms_norm(t.transpose(0, 1), (96,)), x, "aten::mean.dim")


def test_module_docstring_names_every_layout():
    for scheme in ("rows", "columns", "spread"):
        assert f"``{scheme}``" in reduction.__doc__
