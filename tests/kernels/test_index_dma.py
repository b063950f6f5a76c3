"""Advanced indexing by the indirect DMA: gathers and scatters bit-exact against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import ran_only_natively


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_gathers_by_index_tensors_on_any_dims(dtype):
    torch.manual_seed(0)
    x = (torch.randn(9, 9, 5) * 100).to(dtype)
    d = x.to("neuron")
    rows, cols = torch.randint(0, 9, (4, 3)), torch.randint(0, 5, (4, 3))
    dr, dc = rows.to("neuron"), cols.to("neuron")
    cases = [
        (d[dr], x[rows]),  # rows of dim 0 (embedding-style), a 2-D index
        (d[:, dr, dc], x[:, rows, cols]),  # two index tensors after a leading dim
        (d[:, dr[0]], x[:, rows[0]]),  # generate's input_ids[:, positions]
        (d[:, 1:][dr[:, 0]], x[:, 1:][rows[:, 0]]),  # a sliced source
    ]
    for got, want in cases:
        assert got.device.type == "neuron"
        assert torch.equal(got.cpu(), want)
    assert ran_only_natively("aten::index.Tensor")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scatters_a_value_or_rows(dtype):
    torch.manual_seed(1)
    x = torch.randn(128, 70).to(dtype)
    i, j = torch.arange(128), torch.randint(0, 70, (128,))
    d = x.to("neuron")
    want, got = x.clone(), d.clone()
    want[i, j] = want.max()  # forward-forward's ``x[range(n), y] = x.max()``
    got[i.to("neuron"), j.to("neuron")] = got.max()
    assert torch.equal(got.cpu(), want)
    rows = torch.randperm(128)[:20]
    values = torch.randn(20, 70).to(dtype)
    want[rows] = values
    got[rows.to("neuron")] = values.to("neuron")
    assert torch.equal(got.cpu(), want)
    assert torch.neuron.get_fallback_ops() == []


def test_what_the_kernel_does_not_cover_runs_on_the_host():
    x = torch.randn(10, 4)
    d = x.to("neuron")
    neg = torch.tensor([-1, 2])
    assert torch.equal(d[neg.to("neuron")].cpu(), x[neg])  # negative indices: ATen wraps them
    with pytest.raises(IndexError):
        d[torch.tensor([10]).to("neuron")]
    twice = torch.tensor([3, 3])
    acc, dacc = x.clone(), d.clone()
    acc.index_put_((twice,), torch.ones(2, 4), accumulate=True)
    dacc.index_put_((twice.to("neuron"),), torch.ones(2, 4).to("neuron"), accumulate=True)
    assert torch.equal(dacc.cpu(), acc)  # (accumulation is kernels/scatter.py's, native)
    fallbacks = set(torch.neuron.get_fallback_ops())
    assert "aten::index.Tensor" in fallbacks
    assert not fallbacks & {"aten::index_put_", "aten::_index_put_impl_"}


def test_out_variants_that_models_call_run_natively():
    """MoE experts' ``torch.mm(..., out=)`` and compiled graphs' ``where.self_out``."""
    a, b, cond = torch.randn(5, 7), torch.randn(7, 3), torch.randn(5, 7) > 0
    out = torch.empty(0, device="neuron")
    torch.mm(a.to("neuron"), b.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), a @ b, rtol=2e-5, atol=2e-5)
    picked = torch.empty(5, 7, device="neuron")
    torch.where(cond.to("neuron"), a.to("neuron"), b[0, 0].to("neuron"), out=picked)
    assert torch.equal(picked.cpu(), torch.where(cond, a, b[0, 0]))
    assert {"aten::mm.out", "aten::where.self_out"} <= set(torch.neuron.get_executed_ops())
    assert torch.neuron.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_gathers_by_index_tensors_that_broadcast(dtype):
    """Bloom's and Qwen2-MoE's ``mask[rows[:, None, None, None], cols[None, None, None, :]]``."""
    torch.manual_seed(7)
    x = (torch.randn(2, 8) > 0).to(dtype)
    rows, cols = torch.arange(2).view(2, 1, 1, 1), torch.randint(0, 8, (1, 1, 1, 8))
    got = x.to("neuron")[rows.to("neuron"), cols.to("neuron")]
    assert torch.equal(got.cpu(), x[rows, cols])
    assert ran_only_natively("aten::index.Tensor")
