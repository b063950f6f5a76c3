"""Integer and bool reductions, cumsum and isin on GpSimd's integer ALU, against ATen-CPU: exact,
int64 under the 64-bit policy (values chosen past fp32's exact integers)."""

from __future__ import annotations

import pytest
import torch

import neuronsim.kernels.int_reduction  # noqa: F401  (its real kernels, before the manifest lists them)
import neuronsim.kernels.reduction  # noqa: F401

CASES = {  # name -> (fn, the ATen op that must run natively)
    "sum": (lambda x: x.sum(), "aten::sum.dim_IntList"),
    "sum_dim": (lambda x: x.sum(1), "aten::sum.dim_IntList"),
    "sum_outer_keepdim": (lambda x: x.sum(0, keepdim=True), "aten::sum.dim_IntList"),
    "sum_bool": (lambda x: (x > 0).sum(-1), "aten::sum.dim_IntList"),
    "max": (lambda x: x.max(), "aten::max"),
    "amin": (lambda x: x.amin(0), "aten::amin"),
    "amax_transposed": (lambda x: x.t().amax(1), "aten::amax"),
    "any": (lambda x: (x > 100).any(), "aten::any"),
    "any_dim": (lambda x: (x > 100).any(-1, keepdim=True), "aten::any.dim"),
    "all": (lambda x: (x > -(2**31)).all(), "aten::all"),
    "all_dim": (lambda x: x.all(0), "aten::all.dim"),
    "cumsum": (lambda x: x.cumsum(-1), "aten::cumsum"),
    "cumsum_outer": (lambda x: x.cumsum(0), "aten::cumsum"),
    "cumsum_bool": (lambda x: (x > 0).cumsum(1), "aten::cumsum"),
    "isin": (lambda x: torch.isin(x, torch.tensor([5, 7, -3, 2**30 + 1], device=x.device)), "aten::isin"),
    "isin_one": (lambda x: torch.isin(x, torch.tensor(7, device=x.device)), "aten::isin"),
    "isin_invert": (lambda x: torch.isin(x, torch.tensor([5, 7], device=x.device), invert=True),
                    "aten::isin"),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("name", CASES)
def test_matches_cpu_exactly(name, dtype):
    fn, op = CASES[name]
    torch.manual_seed(3)
    x = torch.randint(-200, 200, (37, 300), dtype=dtype)
    x[0, 0], x[1, 1] = 2**30 + 1, 2**30  # equal in fp32, different as integers
    got = fn(x.to("neuron"))
    assert any(o.startswith(op) for o in torch.neuron.get_executed_ops()), torch.neuron.get_fallback_ops()
    assert torch.neuron.get_fallback_ops() == []
    want = fn(x)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.float32, torch.bfloat16])
def test_any_all_of_other_dtypes(dtype):
    x = (torch.arange(3 * 200).view(3, 200) % 7 == 0).to(dtype)
    x[2] = 1
    for fn in (lambda t: t.any(1), lambda t: t.all(1), lambda t: t.all(), lambda t: t.any(0)):
        assert torch.equal(fn(x.to("neuron")).cpu(), fn(x))
    assert torch.neuron.get_fallback_ops() == []


def test_generate_bookkeeping_runs_natively():
    """What Hugging Face generate() computes between forward passes (transformers' greedy loop)."""
    ids = torch.tensor([[5, 9, 2, 0], [7, 2, 1, 1]]).to("neuron")
    eos = torch.tensor([2], device="neuron")
    mask = torch.ones_like(ids)
    positions = mask.long().cumsum(-1) - 1
    finished = torch.isin(ids[:, -1:], eos).any(-1)
    unfinished = torch.ones(2, dtype=torch.long, device="neuron") & ~finished
    done = unfinished.max() == 0
    assert torch.neuron.get_fallback_ops() == []
    assert positions.cpu().tolist() == [[0, 1, 2, 3]] * 2 and not done.item()


def test_uncovered_fall_back_and_stay_correct():
    x = torch.randn(4, 5)
    got = x.to("neuron").cumsum(0)  # float scans accumulate in double on the CPU: the host keeps them
    assert torch.neuron.get_fallback_ops() == ["aten::cumsum"]
    torch.testing.assert_close(got.cpu(), x.cumsum(0))
    big = torch.arange(100)
    assert torch.isin(big.to("neuron"), big.to("neuron")).all().item()  # 100 test elements: the host's
    assert "aten::isin.Tensor_Tensor" in torch.neuron.get_fallback_ops()
