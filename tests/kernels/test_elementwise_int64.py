"""int64 arithmetic, comparisons, bit operators and fills under the device's 64-bit policy: native
kernels compute on the low 32-bit words and sign-extend the result, exactly what the host's
narrowing (int64 -> int32, compute, widen back) gives."""

from __future__ import annotations

import pytest
import torch

import neuronsim.kernels.elementwise  # noqa: F401  (its real kernels, before the manifest lists them)

INT64 = {
    "add": (lambda a, b: torch.add(a, b, alpha=3), "aten::add.Tensor"),
    "sub": (torch.sub, "aten::sub.Tensor"),
    "mul": (torch.mul, "aten::mul.Tensor"),  # wraps past int32, as the policy's int32 product does
    "max": (torch.maximum, "aten::maximum"),
    "eq": (torch.eq, "aten::eq.Tensor"),
    "lt": (torch.lt, "aten::lt.Tensor"),
    "and": (torch.bitwise_and, "aten::bitwise_and.Tensor"),
    "not": (lambda a, b: ~a, "aten::bitwise_not"),
    "neg": (lambda a, b: -a, "aten::neg"),
    "sign": (lambda a, b: a.sign(), "aten::sign"),
    "abs": (lambda a, b: a.abs(), "aten::abs"),
    "clamp": (lambda a, b: a.clamp(-5, 7), "aten::clamp"),
    "adds": (lambda a, b: a + 7, "aten::add.Tensor"),
    "rsubs": (lambda a, b: 1 - a, "aten::rsub.Scalar"),
    "eqs": (lambda a, b: a == 0, "aten::eq.Scalar"),
    "mask_and": (lambda a, b: a & (b > 0), "aten::bitwise_and.Tensor"),  # generate()'s ids & mask
    "mixed": (lambda a, b: a * b.to(torch.int32), "aten::mul.Tensor"),
    "fill_": (lambda a, b: (a * 1).fill_(-3), "aten::fill_.Scalar"),
    "add_": (lambda a, b: a.clone().add_(b[:1]), "aten::add_.Tensor"),
}


def _policy(fn, a, b):
    """The host's 64-bit policy: narrow to int32, compute, widen back."""
    out = fn(a.to(torch.int32), b.to(torch.int32))
    return out.to(torch.int64) if out.dtype is torch.int32 else out


@pytest.mark.parametrize("name", INT64)
def test_int64_runs_natively_as_the_policy_computes_it(name):
    fn, op = INT64[name]
    torch.manual_seed(6)
    a = torch.randint(-(2**30), 2**30, (37, 65))
    b = torch.randint(-(2**30), 2**30, (37, 65))
    a[0, :4] = torch.tensor([0, -1, 2**31 - 1, -(2**31)])
    got = fn(a.to("neuron"), b.to("neuron"))
    assert any(o.startswith(op) for o in torch.neuron.get_executed_ops()), torch.neuron.get_fallback_ops()
    assert torch.neuron.get_fallback_ops() == []
    want = _policy(fn, a, b)
    assert got.dtype == fn(a, b).dtype
    assert torch.equal(got.cpu(), want)


def test_int64_results_are_sign_extended_and_views_are_read_in_place():
    x = torch.arange(-8, 8).view(4, 4)
    got = x.to("neuron").t()[1:] * 3 - 5
    assert torch.neuron.get_fallback_ops() == []
    assert torch.equal(got.cpu(), x.t()[1:] * 3 - 5)
    wrapped = torch.tensor([2**31 - 1, -(2**31)], device="neuron") + 1  # int32 arithmetic wraps
    assert wrapped.cpu().tolist() == [-(2**31), -(2**31) + 1]


def test_with_the_policy_off_int64_computes_in_64_bits_on_the_host():
    import neuronsim

    big = torch.tensor([2**40 + 3, -(2**35)], device="neuron")
    with neuronsim.options(cast_64bit=False):
        assert (big + 1).cpu().tolist() == [2**40 + 4, -(2**35) + 1]
        assert big.masked_fill(big < 0, 5).cpu().tolist() == [2**40 + 3, 5]
        assert big.sum().item() == 2**40 + 3 - 2**35
    fallen = torch.neuron.get_fallback_ops()
    assert len(fallen) == 4 and fallen[0] == "aten::add.Tensor" and "aten::lt.Scalar" in fallen
    torch.neuron.clear_op_tracking()
    assert (big + 1).cpu().tolist() == [4, 1]  # the policy back on: the low words, natively
    assert torch.neuron.get_fallback_ops() == []


def test_out_of_int32_scalars_fall_back():
    x = torch.arange(5, device="neuron")
    y = x + 2**40  # the scalar does not fit an int32: the host decides (it wraps, as int32 ATen does)
    assert torch.neuron.get_fallback_ops() == ["aten::add.Tensor"]
    assert y.dtype is torch.int64
    assert y.cpu().tolist() == (torch.arange(5, dtype=torch.int32) + 2**40).tolist()


def test_int64_casts_and_cat_run_natively():
    x = torch.tensor([[0, -1, 2**31 - 1], [-(2**31), 5, 2**33 + 7]])
    d = x.to("neuron")
    narrowed = d.to(torch.int32)  # ATen's cast wraps to the low word
    widened = narrowed.to(torch.int64)
    from_bool = (d > 0).long()
    joined = torch.cat([d, d[:, :1]], dim=1)
    assert torch.neuron.get_fallback_ops() == []
    assert torch.equal(narrowed.cpu(), x.to(torch.int32))
    assert torch.equal(widened.cpu(), x.to(torch.int32).to(torch.int64))
    assert torch.equal(from_bool.cpu(), (x.to(torch.int32) > 0).long())
    assert torch.equal(joined.cpu(), torch.cat([x, x[:, :1]], dim=1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.bool])
def test_integer_to_float_and_bool_casts(dtype):
    x = torch.tensor([[2**30 + 1, -(2**24) - 1, 5, 0], [1, 2, 3, 2**31 - 1]])
    d = x.to("neuron")
    for got, want in ((d.to(dtype), x.to(dtype)), (d.int().to(dtype), x.int().to(dtype)),
                      ((d > 2).to(dtype), (x > 2).to(dtype))):
        assert got.dtype == dtype and torch.equal(got.cpu(), want)
    assert torch.neuron.get_fallback_ops() == []
    big = torch.tensor([2**40 + 1, 3])  # past int32: the host converts all 64 bits
    assert torch.equal(big.to("neuron").to(dtype).cpu(), big.to(dtype))
    assert torch.neuron.get_fallback_ops() == ["aten::copy_"]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool])
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16])
def test_float_to_integer_casts_truncate_natively(dtype, src):
    x = torch.tensor([[0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.75, -2.75], [7.0, 100.9, -100.9, 3e-8, 127.0,
                      1e4, -3e3, 250.25]]).to(src)
    if dtype is torch.uint8:
        x = x.abs().clamp(max=255)
    got = x.to("neuron").to(dtype)
    assert got.dtype == dtype and torch.equal(got.cpu(), x.to(dtype))
    assert torch.neuron.get_fallback_ops() == []
    if dtype is not torch.bool:  # past the type's range, or NaN: undefined in C++, the host decides
        odd = torch.tensor([float("nan"), 2.0**40 if dtype in (torch.int64, torch.int32) else 1e6])
        assert torch.equal(odd.to("neuron").to(dtype).cpu(), odd.to(dtype))
        assert torch.neuron.get_fallback_ops() == ["aten::copy_"]


def test_masked_fill_and_where_on_int64():
    x = torch.tensor([[2**30 + 1, -(2**30) - 3, 5, 7], [1, 2, 3, 2**31 - 1]])
    m = torch.tensor([[True, False, False, True], [False, True, False, False]])
    d, dm = x.to("neuron"), m.to("neuron")
    filled = d.clone().masked_fill_(dm, -7)
    picked = torch.where(dm, d, d * 2)
    assert torch.neuron.get_fallback_ops() == []
    assert torch.equal(filled.cpu(), x.masked_fill(m, -7))
    assert torch.equal(picked.cpu(), torch.where(m, x, (x.int() * 2).long()))


def test_true_division_of_integers_gives_float32_natively():
    """``int_tensor / n`` (the HF Trainer divides its int64 token counts): each integer operand is
    converted to fp32 (rounding to nearest past 2**24), then divided, as ATen does."""
    torch.manual_seed(3)
    cases = [(torch.tensor(7), 1), (torch.randint(-2**30, 2**30, (5, 33)), 3),
             (torch.randint(-100, 100, (4, 5), dtype=torch.int32), torch.randint(1, 9, (5,))),
             (torch.randint(0, 2, (6,)).bool(), 2.5)]
    for a, b in cases:
        torch.neuron.clear_op_tracking()
        got = a.to("neuron") / (b.to("neuron") if isinstance(b, torch.Tensor) else b)
        want = a / b
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
        assert torch.neuron.get_fallback_ops() == [], (a.dtype, b)


def test_integer_operands_of_float32_arithmetic_are_converted_as_aten_does():
    """``float32 + int32`` (Mixtral's expert counts), DeBERTa's ``float * int64`` positions."""
    torch.manual_seed(4)
    a, b = torch.randn(4, 8), torch.randint(-50, 50, (4, 8), dtype=torch.int32)
    c = torch.randint(-2**30, 2**30, (8,))
    for fn in (lambda x, y, z: x + y, lambda x, y, z: y - x, lambda x, y, z: x * z,
               lambda x, y, z: torch.add(x, z, alpha=0.5), lambda x, y, z: torch.maximum(x, y)):
        torch.neuron.clear_op_tracking()
        got = fn(a.to("neuron"), b.to("neuron"), c.to("neuron"))
        assert torch.equal(got.cpu(), fn(a, b, c)) and torch.neuron.get_fallback_ops() == []
