"""mm / addmm / linear on TensorE against ATen-CPU, and the kernel's time against the cost model."""

from __future__ import annotations

import pytest
import torch
from conftest import DTYPES

from neuronsim.device import settings
from neuronsim.kernels import matmul, registry

aten = torch.ops.aten


def _close(got, ref, dtype, k):
    # fp32 accumulation in a different order; 16-bit outputs rounded once.
    tol = 2e-6 * k**0.5 if dtype == torch.float32 else 2**-7
    scale = ref.abs().max().item()
    assert (got.cpu().float() - ref).abs().max().item() <= tol * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(64, 96, 80), (300, 200, 700), (129, 257, 513)])
def test_mm_addmm_linear_and_transposed_operands(mkn, dtype):
    m, k, n = mkn
    torch.manual_seed(0)
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    w, bias = torch.randn(n, k).to(dtype), torch.randn(n).to(dtype)
    da, db, dw, dbias = (t.to("neuron") for t in (a, b, w, bias))
    _close(da @ db, a.float() @ b.float(), dtype, k)
    _close(torch.addmm(dbias, da, db), torch.addmm(bias.float(), a.float(), b.float()), dtype, k)
    _close(torch.nn.functional.linear(da, dw, dbias),
           torch.nn.functional.linear(a.float(), w.float(), bias.float()), dtype, k)
    g = torch.randn(m, n).to(dtype)
    _close(da.t() @ g.to("neuron"), a.float().t() @ g.float(), dtype, m)  # a weight gradient's shape
    assert torch.neuron.get_fallback_ops() == []
    assert set(torch.neuron.get_executed_ops()) >= {"aten::mm", "aten::addmm"}


def test_other_scalings_and_dtypes_fall_back():
    a = torch.randn(8, 8).to("neuron")
    i = torch.ones(4, 4, dtype=torch.int32).to("neuron")
    torch.neuron.clear_op_tracking()
    torch.addmm(a, a, a, beta=0.5)
    i @ i
    assert torch.neuron.get_fallback_ops() == ["aten::addmm", "aten::mm"]


def _entry(op, *args):
    """Trace and schedule ``op`` on ``args`` without running it."""
    return registry.NativeOp(op, registry.PLANNERS[f"{op.name()}.default"])._build(args, {})


def test_a_large_bf16_mm_is_tensor_engine_bound():
    """2048^3 bf16: within 10% of 2*M*K*N / tensor_engine_peak_flops_bf16 (traced and scheduled,
    not executed)."""
    a = torch.empty(2048, 2048, dtype=torch.bfloat16, device="neuron")
    entry = _entry(aten.mm.default, a, a)
    ideal = matmul.ideal_ns(2048, 2048, 2048, settings.chip())
    total = entry.prepared.timeline.total_ns
    assert ideal <= total <= 1.10 * ideal, (total, ideal)


def test_a_small_mm_shows_its_fixed_overheads():
    """A 128^3 mm is far from TensorE-bound: DMA fixed costs and the launch dominate."""
    chip = settings.chip()
    a = torch.empty(128, 128, dtype=torch.bfloat16, device="neuron")
    entry = _entry(aten.mm.default, a, a)
    total = entry.prepared.timeline.total_ns
    assert total > 10 * matmul.ideal_ns(128, 128, 128, chip)
    assert total >= 2 * chip.dma_fixed_cost_ns  # a load and the store, at least
    assert chip.kernel_launch_overhead_ns > 0  # charged as its own clock entry (test_registry)


@pytest.mark.slow
def test_a_large_bf16_mm_executes():
    torch.manual_seed(0)
    a, b = torch.randn(2048, 2048).bfloat16(), torch.randn(2048, 2048).bfloat16()
    _close(a.to("neuron") @ b.to("neuron"), a.float() @ b.float(), torch.bfloat16, 2048)
