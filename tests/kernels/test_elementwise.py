"""Element-wise binary ops with broadcasting (VectorE) and activations (ScalarE) against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively, tolerance

SHAPES = [
    ((300, 70), (300, 70)),  # contiguous: flat tiles plus tails
    ((4, 33, 65), (65,)),  # bias-style broadcast along the partitions
    ((4, 33, 65), (4, 33, 1)),  # broadcast along the free dim
    ((2, 3, 40, 40), (2, 1, 40, 40)),  # attention-mask style
    ((5,), ()),  # a 0-dim device operand
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div])
def test_binary_with_broadcasting(op, shapes, dtype):
    torch.manual_seed(0)
    a, b = (torch.randn(s).to(dtype) for s in shapes)
    if op is torch.div:
        b = b.sign() * (b.abs() + 0.5)
    assert_matches_cpu(op(a.to("neuron"), b.to("neuron")), op(a, b))
    assert ran_natively(f"aten::{op.__name__}.Tensor")


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_scalars_transposes_and_in_place(dtype):
    torch.manual_seed(1)
    a, b = torch.randn(64, 48).to(dtype), torch.randn(48, 64).to(dtype)
    da, db = a.to("neuron"), b.to("neuron")
    assert_matches_cpu(torch.add(da, db.t(), alpha=0.25), torch.add(a, b.t(), alpha=0.25))
    assert_matches_cpu(torch.sub(da, db.t(), alpha=3), torch.sub(a, b.t(), alpha=3))
    assert_matches_cpu(da * 1.5, a * 1.5)
    assert_matches_cpu(da - 2, a - 2)
    assert_matches_cpu(torch.sub(da, 2, alpha=0.5), torch.sub(a, 2, alpha=0.5))
    assert_matches_cpu(da / 3.0, a / 3.0)
    da.mul_(db.t())
    a.mul_(b.t())
    assert_matches_cpu(da, a)
    assert torch.neuron.get_fallback_ops() == []


def test_mixed_dtypes_promote_as_aten_does():
    a = torch.randn(40, 30).to(torch.bfloat16)
    b = torch.randn(40, 30)
    out = a.to("neuron") + b.to("neuron")
    assert out.dtype == torch.float32
    assert_matches_cpu(out, a + b)


def test_int64_runs_natively_under_the_64bit_policy():  # (test_elementwise_int64.py has the details)
    x = torch.arange(10).to("neuron")
    torch.neuron.clear_op_tracking()
    assert (x * x).cpu().tolist() == [i * i for i in range(10)]
    assert torch.neuron.get_fallback_ops() == []


ACTIVATIONS = [
    torch.exp,
    torch.tanh,
    torch.relu,
    torch.sigmoid,
    torch.nn.functional.gelu,
    lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ACTIVATIONS)
def test_activations(fn, dtype):
    torch.manual_seed(2)
    x = (torch.randn(130, 257) * 2).to(dtype)
    assert_matches_cpu(fn(x.to("neuron")), fn(x))
    assert torch.neuron.get_fallback_ops() == []


# ---------------------------------------------------------------- breadth (issue #5)

import neuronsim.kernels.elementwise  # noqa: E402, F401  (its real kernels, before the manifest lists them)

F = torch.nn.functional
ATEN = torch.ops.aten
UNARY = {  # name -> (fn, ATen op that must run natively)
    "exp2": (torch.exp2, "aten::exp2"),
    "log": (lambda a: torch.log(a.abs() + 0.1), "aten::log"),
    "log2": (lambda a: torch.log2(a.abs() + 0.1), "aten::log2"),
    "log10": (lambda a: torch.log10(a.abs() + 0.1), "aten::log10"),
    "silu": (F.silu, "aten::silu"),
    "erf": (torch.erf, "aten::erf"),
    "sin": (torch.sin, "aten::sin"),
    "cos": (torch.cos, "aten::cos"),
    "rsqrt": (lambda a: torch.rsqrt(a * a + 0.1), "aten::rsqrt"),
    "reciprocal": (torch.reciprocal, "aten::reciprocal"),
    "neg": (torch.neg, "aten::neg"),
    "sign": (torch.sign, "aten::sign"),
    "mish": (F.mish, "aten::mish"),
    "hardsigmoid": (F.hardsigmoid, "aten::hardsigmoid"),
    "hardswish": (F.hardswish, "aten::hardswish"),
    "softplus": (lambda a: F.softplus(a, beta=2, threshold=15), "aten::softplus"),
    "leaky_relu": (lambda a: F.leaky_relu(a, 1.5), "aten::leaky_relu"),
    "selu": (F.selu, "aten::elu"),
    "celu": (lambda a: F.celu(a, 0.7), "aten::elu"),
    "threshold": (lambda a: F.threshold(a, 0.5, -2.0), "aten::threshold"),
    "relu6": (F.relu6, "aten::hardtanh"),
    "clamp": (lambda a: a.clamp(-1, 2), "aten::clamp"),
    "clamp_min": (lambda a: a.clamp_min(0.3), "aten::clamp_min"),
    "pow": (lambda a: a**3, "aten::pow.Tensor_Scalar"),
    "gt": (lambda a: a > 0.1, "aten::gt.Scalar"),
    "ne": (lambda a: a != 0.1, "aten::ne.Scalar"),
    "fill_": (lambda a: (a * 1).fill_(2.5), "aten::fill_.Scalar"),
    "zero_": (lambda a: (a * 1).zero_(), "aten::zero_"),
    "add_": (lambda a: (a * 1).add_(1.5, alpha=2), "aten::add_.Tensor"),
    "rsub": (lambda a: 2 - a, "aten::rsub.Scalar"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_breadth(name, dtype):
    fn, aten = UNARY[name]
    torch.manual_seed(3)
    x = (torch.randn(37, 65) * 3).to(dtype)
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    if name == "silu":  # ScalarE's silu(-inf) is its limit 0; ATen's -inf * sigmoid(-inf) is NaN
        x[0, 2] = 0.0
    expected = fn(x)
    torch.neuron.clear_op_tracking()
    got = fn(x.to("neuron"))
    assert any(op.startswith(aten) for op in torch.neuron.get_executed_ops()), torch.neuron.get_fallback_ops()
    tol = tolerance(dtype)
    if name == "gelu_tanh_backward" and dtype == torch.float32:
        # 1 - tanh^2 near tanh = +-1 turns ScalarE's last-ulp difference from std::tanh into ~1e-6
        tol["atol"] = 1e-5  # (PyTorch's own fp32 tolerance for gradients)
    assert_matches_cpu(got, expected, **tol, equal_nan=True)


BINARY = {
    "maximum": (torch.maximum, "aten::maximum"),
    "minimum": (torch.minimum, "aten::minimum"),
    "fmod": (torch.fmod, "aten::fmod.Tensor"),
    "pow": (lambda a, b: a.abs() ** (b / 3), "aten::pow.Tensor_Tensor"),
    "rsub": (lambda a, b: torch.rsub(a, b, alpha=0.5), "aten::rsub.Tensor"),
    "eq": (lambda a, b: a == b.round(), "aten::eq.Tensor"),
    "le": (torch.le, "aten::le.Tensor"),
    "clamp": (lambda a, b: a.clamp(b - 1, b + 1), "aten::clamp.Tensor"),
    "sigmoid_backward": (lambda g, y: ATEN.sigmoid_backward(g, torch.sigmoid(y)), "aten::sigmoid_backward"),
    "tanh_backward": (lambda g, y: ATEN.tanh_backward(g, torch.tanh(y)), "aten::tanh_backward"),
    "silu_backward": (ATEN.silu_backward, "aten::silu_backward"),
    "gelu_backward": (ATEN.gelu_backward, "aten::gelu_backward"),
    "gelu_tanh_backward": (lambda g, x: ATEN.gelu_backward(g, x, approximate="tanh"), "aten::gelu_backward"),
    "threshold_backward": (lambda g, x: ATEN.threshold_backward(g, x, 0.0), "aten::threshold_backward"),
    "leaky_relu_backward": (lambda g, x: ATEN.leaky_relu_backward(g, x, 0.2, False),
                            "aten::leaky_relu_backward"),
    "hardtanh_backward": (lambda g, x: ATEN.hardtanh_backward(g, x.round(), -1.0, 2.0),
                          "aten::hardtanh_backward"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_breadth(name, dtype):
    fn, aten = BINARY[name]
    torch.manual_seed(4)
    a, b = ((torch.randn(37, 65) * 3).to(dtype) for _ in range(2))
    expected = fn(a, b)
    torch.neuron.clear_op_tracking()
    got = fn(a.to("neuron"), b.to("neuron"))
    assert any(op.startswith(aten) for op in torch.neuron.get_executed_ops()), torch.neuron.get_fallback_ops()
    tol = tolerance(dtype)
    if name == "gelu_tanh_backward" and dtype == torch.float32:
        # 1 - tanh^2 near tanh = +-1 turns ScalarE's last-ulp difference from std::tanh into ~1e-6
        tol["atol"] = 1e-5  # (PyTorch's own fp32 tolerance for gradients)
    assert_matches_cpu(got, expected, **tol, equal_nan=True)


INT32 = {
    "add": (lambda a, b: torch.add(a, b, alpha=3), "aten::add.Tensor"),
    "mul": (torch.mul, "aten::mul.Tensor"),
    "max": (torch.maximum, "aten::maximum"),
    "lt": (torch.lt, "aten::lt.Tensor"),
    "and": (torch.bitwise_and, "aten::bitwise_and.Tensor"),
    "xor": (lambda a, b: a ^ b, "aten::bitwise_xor.Tensor"),
    "not": (lambda a, b: ~a, "aten::bitwise_not"),
    "neg": (lambda a, b: -a, "aten::neg"),
    "clamp": (lambda a, b: a.clamp(-5, 7), "aten::clamp"),
    "adds": (lambda a, b: a + 7, "aten::add.Tensor"),
    "gts": (lambda a, b: a > 3, "aten::gt.Scalar"),
    "bool_and": (lambda a, b: (a > 0) & (b > 0), "aten::bitwise_and.Tensor"),
    "fill_": (lambda a, b: (a * 1).fill_(-3), "aten::fill_.Scalar"),
}


@pytest.mark.parametrize("name", INT32)
def test_int32_exact(name):
    fn, aten = INT32[name]
    torch.manual_seed(5)
    a = torch.randint(-(2**30), 2**30, (37, 65), dtype=torch.int32)  # beyond fp32's exact integers
    b = torch.randint(-(2**30), 2**30, (37, 65), dtype=torch.int32)
    a[0, 0], b[0, 0] = 2**30 + 1, 2**30  # equal in fp32, different as ints
    expected = fn(a, b)
    torch.neuron.clear_op_tracking()
    got = fn(a.to("neuron"), b.to("neuron"))
    assert any(op.startswith(aten) for op in torch.neuron.get_executed_ops()), torch.neuron.get_fallback_ops()
    assert torch.equal(got.cpu(), expected)


def test_uncovered_signatures_fall_back():
    x = torch.randn(8, 8).to("neuron")
    torch.neuron.clear_op_tracking()
    F.softplus(x, threshold=1.0)  # ATen's threshold changes the result: not one activation
    assert set(torch.neuron.get_fallback_ops()) >= {"aten::softplus"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_isneginf_and_isposinf_natively(dtype):
    x = torch.tensor([[-float("inf"), float("inf"), float("nan"), 0.0, -3.0e38, 1.0]] * 3, dtype=dtype)
    d = x.to("neuron")
    assert torch.equal(torch.isneginf(d).cpu(), torch.isneginf(x))
    assert torch.equal(torch.isposinf(d).cpu(), torch.isposinf(x))
    assert torch.neuron.get_executed_ops() == ["aten::isneginf", "aten::isposinf"]
    assert torch.neuron.get_fallback_ops() == []


def test_pow_of_a_scalar_base():
    """MPT's ALiBi slopes ``2 ** -(...)``: VectorE's power, within fp32's few ulps as pow.Tensor_Tensor."""
    torch.manual_seed(15)
    x = torch.cat([torch.randn(500) * 8, torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf")])])
    for base in (2, 0.5, 10000.0):
        torch.neuron.clear_op_tracking()
        got = torch.pow(base, x.to("neuron"))
        assert ran_natively("aten::pow.Scalar")
        assert_matches_cpu(got, torch.pow(base, x))
