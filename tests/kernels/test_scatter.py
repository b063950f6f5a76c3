"""scatter, scatter_add, index_put_(accumulate=True) and histc on the device: bit-exact against
ATen-CPU, duplicates and their order included."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_same_bits, ran_only_natively


def _dev(*ts):
    return [t.to("neuron") for t in ts]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scatter_add_sums_duplicates_in_cpus_order(dtype):
    torch.manual_seed(1)
    x = torch.randn(6, 10).to(dtype)
    x[0, 3] = -0.0  # nothing added there stays -0.0
    index = torch.randint(0, 10, (6, 30))
    index[0][index[0] == 3] = 4
    src = torch.randn(6, 30).to(dtype)
    got = torch.scatter_add(*_dev(x), 1, *_dev(index, src))
    assert ran_only_natively("aten::scatter_add")
    assert_same_bits(got, torch.scatter_add(x, 1, index, src))


def test_scatter_add_in_place_on_moe_counts_and_broadcast_indices():
    torch.manual_seed(2)
    ids = torch.randint(0, 4, (32,))
    weights = torch.rand(32)
    got = torch.zeros(4).to("neuron").scatter_add_(0, *_dev(ids, weights))
    assert_same_bits(got, torch.zeros(4).scatter_add_(0, ids, weights))
    index = torch.randint(0, 16, (1, 8, 8)).expand(4, 8, 8)  # DeBERTa's relative positions
    src = torch.randn(4, 8, 8).transpose(1, 2)
    got = torch.zeros(4, 8, 16).to("neuron").scatter_add_(-1, *_dev(index, src))
    assert_same_bits(got, torch.zeros(4, 8, 16).scatter_add_(-1, index, src))
    assert torch.neuron.get_fallback_ops() == []


def test_scatter_writes_the_last_duplicate_as_cpu_does():
    torch.manual_seed(3)
    routing = torch.topk(torch.randn(16, 4), 2)
    got = torch.zeros(16, 4).to("neuron").scatter_(-1, *_dev(routing.indices, routing.values))
    assert_same_bits(got, torch.zeros(16, 4).scatter_(-1, routing.indices, routing.values))
    x, index, src = torch.randn(5, 6), torch.randint(0, 6, (5, 9)), torch.randn(5, 9)
    assert_same_bits(torch.scatter(*_dev(x), 1, *_dev(index, src)), torch.scatter(x, 1, index, src))
    assert torch.neuron.get_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_put_accumulate_adds_rows_in_order(dtype):
    """MoE experts' outputs added back to their tokens; bf16 rounds after every addition, as on CPU."""
    torch.manual_seed(4)
    for shape, n in [((16, 32), 32), ((32,), 32), ((20, 3, 5), 70)]:
        x, index = torch.randn(shape).to(dtype), torch.randint(0, shape[0], (n,))
        values = torch.randn(n, *shape[1:]).to(dtype)
        got = x.to("neuron").index_put_((index.to("neuron"),), values.to("neuron"), accumulate=True)
        assert_same_bits(got, x.clone().index_put_((index,), values, accumulate=True))
    assert ran_only_natively("aten::_index_put_impl_") or ran_only_natively("aten::index_put_")
    assert torch.neuron.get_fallback_ops() == []


def test_histc_counts_floats_as_cpu_and_integers_as_cuda():
    torch.manual_seed(5)
    lo, hi, bins = -1.3, 2.1, 7
    edges = torch.linspace(lo, hi, bins + 1)
    x = torch.cat([edges, torch.nextafter(edges, edges + 1), torch.nextafter(edges, edges - 1),
                   torch.randn(3000), torch.tensor([float("nan"), float("inf")])])
    got = torch.histc(x.to("neuron"), bins=bins, min=lo, max=hi)
    assert ran_only_natively("aten::histc")
    assert_same_bits(got, torch.histc(x, bins=bins, min=lo, max=hi))
    ids = torch.randint(0, 8, (64,))  # a MoE's tokens per expert (transformers passes ints off CPU)
    for dtype in (torch.int32, torch.int64):
        torch.neuron.clear_op_tracking()
        got = torch.histc(ids.to(dtype).to("neuron"), bins=8, min=0, max=7)
        assert torch.neuron.get_fallback_ops() == []
        assert_same_bits(got, torch.histc(ids.double(), bins=8, min=0, max=7).to(dtype))


def test_index_put_accumulate_with_2d_and_several_index_tensors():
    """Whisper's embedding backward ``x[ids] += g`` (2-D ids), CLIP's pooled ``x[arange, pos] += g``."""
    torch.manual_seed(6)
    x, ids, g = torch.zeros(32, 32), torch.randint(0, 32, (2, 6)), torch.randn(2, 6, 32)
    got = x.to("neuron").index_put_((ids.to("neuron"),), g.to("neuron"), accumulate=True)
    assert_same_bits(got, x.clone().index_put_((ids,), g, accumulate=True))
    x, rows, pos, g = torch.randn(2, 8, 32), torch.arange(2), torch.tensor([5, 5]), torch.randn(2, 32)
    got = x.to("neuron").index_put_(tuple(_dev(rows, pos)), g.to("neuron"), accumulate=True)
    assert_same_bits(got, x.clone().index_put_((rows, pos), g, accumulate=True))
    assert torch.neuron.get_fallback_ops() == []


def test_functional_scatter_with_a_smaller_index_keeps_the_rest_of_self():
    torch.manual_seed(7)
    x, index, src = torch.randn(10, 5), torch.randint(0, 5, (5, 5)), torch.randn(5, 5)
    for fn in (torch.scatter, torch.scatter_add):
        assert_same_bits(fn(*_dev(x), 1, *_dev(index, src)), fn(x, 1, index, src))
