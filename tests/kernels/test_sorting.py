"""topk and sort on the device: values and indices bit-exact against ATen-CPU, tie order included."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_same_bits, ran_only_natively


def _special(shape, seed):
    torch.manual_seed(seed)
    x = torch.randn(shape)
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    return x


@pytest.mark.parametrize("case", ["router", "smallest", "bf16_dim0", "k20_rows", "special"])
def test_topk_matches_cpu(case):
    torch.manual_seed(1)
    x, args = {
        "router": (torch.randn(16, 8), (2,)),  # a MoE router: tokens x experts, top 2
        "smallest": (torch.randn(5, 9), (3, -1, False)),
        "bf16_dim0": ((torch.stack([torch.randperm(37) for _ in range(18)], 1) - 18.5).view(37, 6, 3)
                      .to(torch.bfloat16), (5, 0)),  # distinct down dim 0
        "k20_rows": (torch.randn(130, 300), (20,)),  # two row tiles, three max8 rounds
        "special": (_special((3, 50), 2), (10,)),  # NaN ranks first, +-inf
    }[case]
    want = torch.topk(x, *args)
    got = torch.topk(x.to("neuron"), *args)
    assert ran_only_natively("aten::topk")
    assert_same_bits(got.values, want.values)
    assert_same_bits(got.indices, want.indices)


def test_topk_with_ties_or_nan_among_the_smallest_runs_on_the_host():
    for x, args in [(torch.tensor([[3.0, 1, 3, 2, 3, 1, 2, 3]]), (3,)),  # CPU's nth_element order
                    (torch.tensor([[0.0, -0.0, -1.0, 2.0]]), (3,)),  # 0.0 == -0.0
                    (_special((2, 20), 3), (4, -1, False))]:
        torch.neuron.clear_op_tracking()
        want, got = torch.topk(x, *args), torch.topk(x.to("neuron"), *args)
        assert "aten::topk" in torch.neuron.get_fallback_ops()
        assert_same_bits(got.values, want.values)
        assert_same_bits(got.indices, want.indices)


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_orders_ties_nan_and_signed_zeros_as_cpu(descending):
    x = _special((5, 300), 4)
    x[0, 10:15] = float("nan")
    x[1, 3:9] = float("inf")
    x[2, 1:6] = torch.tensor([-0.0, 0.0, -0.0, 1.0, 1.0])
    want = torch.sort(x, dim=1, stable=True, descending=descending)
    got = torch.sort(x.to("neuron"), dim=1, stable=True, descending=descending)
    assert ran_only_natively("aten::sort.stable")
    assert_same_bits(got.values, want.values)
    assert_same_bits(got.indices, want.indices)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bfloat16])
def test_sort_of_expert_ids_and_views(dtype):
    """MoE grouping sorts the flattened top-k expert ids; argsort of a transposed int tensor."""
    torch.manual_seed(5)
    ids = torch.randint(0, 4, (32,)).to(dtype)
    for fn in (lambda t: torch.sort(t, stable=True), lambda t: torch.sort(t[:12]),  # <= 16: CPU is stable
               lambda t: torch.sort(t.view(4, 8).t(), dim=0, stable=True, descending=True)):
        torch.neuron.clear_op_tracking()
        want, got = fn(ids), fn(ids.to("neuron"))
        assert torch.neuron.get_fallback_ops() == []
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


def test_unstable_sort_with_ties_beyond_insertion_sort_runs_on_the_host():
    """CPU's std::sort is introsort past 16 elements: its order among equal values is its own."""
    torch.manual_seed(6)
    ids = torch.randint(0, 4, (32,))
    want, got = torch.sort(ids), torch.sort(ids.to("neuron"))
    assert "aten::sort" in torch.neuron.get_fallback_ops()
    assert_same_bits(got.indices, want.indices)
    torch.neuron.clear_op_tracking()
    x = torch.randn(4, 100)  # no ties: the order is unique, so native
    want, got = torch.sort(x, descending=True), torch.sort(x.to("neuron"), descending=True)
    assert ran_only_natively("aten::sort")
    assert_same_bits(got.indices, want.indices)
