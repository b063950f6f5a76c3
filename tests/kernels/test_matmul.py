"""mm / addmm / linear on TensorE against ATen-CPU, and the kernel's time against the cost model."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, ran_natively

from neuronsim.device import settings
from neuronsim.device.native.op import NativeOp
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
    return NativeOp(op, registry.TABLE[f"{op.name()}.default"].planner)._build(args, {})


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
    assert total >= chip.dma_read_latency_ns + chip.dma_write_latency_ns  # a load and the store, at least
    assert chip.kernel_launch_overhead_ns > 0  # charged as its own clock entry (test_registry)


@pytest.mark.slow
def test_a_large_bf16_mm_executes():
    torch.manual_seed(0)
    a, b = torch.randn(2048, 2048).bfloat16(), torch.randn(2048, 2048).bfloat16()
    _close(a.to("neuron") @ b.to("neuron"), a.float() @ b.float(), torch.bfloat16, 2048)


# ---------------------------------------------------------------- bmm / baddbmm


def _attention_operands(b, h, t, d, dtype):
    """q, k, v as train_gpt's attention makes them: head views of one [b, t, 3*h*d] projection."""
    qkv = torch.randn(b, t, 3 * h * d).to(dtype)
    return [z.view(b, t, h, d).transpose(1, 2) for z in qkv.split(h * d, dim=2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bhtd", [(4, 4, 16, 16), (2, 3, 37, 24), (1, 2, 200, 64)])
def test_attention_bmm_with_transposed_views(bhtd, dtype):
    torch.manual_seed(0)
    q, k, v = _attention_operands(*bhtd, dtype)
    dq, dk, dv = (t.to("neuron") for t in (q, k, v))
    att = dq @ dk.transpose(-2, -1)
    ref_att = q.float() @ k.float().transpose(-2, -1)
    _close(att, ref_att, dtype, bhtd[3])
    p = torch.softmax(ref_att, -1).to(dtype)
    _close(p.to("neuron") @ dv, p.float() @ v.float(), dtype, bhtd[2])
    # the backward's shapes: grad_y @ v^T and att^T @ grad_y
    gy = torch.randn(*q.shape).to(dtype)
    _close(gy.to("neuron") @ dv.transpose(-2, -1), gy.float() @ v.float().transpose(-2, -1), dtype, bhtd[3])
    _close(p.to("neuron").transpose(-2, -1) @ gy.to("neuron"), p.float().transpose(-2, -1) @ gy.float(),
           dtype, bhtd[2])
    assert ran_natively("aten::bmm")
    assert "aten::bmm" not in torch.neuron.get_fallback_ops()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", [(5, 7, 300, 9), (3, 129, 130, 131), (2, 260, 140, 600)])
def test_bmm_odd_sizes_and_layouts(bmkn, dtype):
    """Odd sizes, K past one chunk, M past one tile, N past one PSUM bank (the per-item kernel),
    and each operand in either layout, raw bmm (no matmul expansion)."""
    bs, m, k, n = bmkn
    torch.manual_seed(1)
    a, b = torch.randn(bs, m, k).to(dtype), torch.randn(bs, k, n).to(dtype)
    for x in (a, a.transpose(1, 2).contiguous().transpose(1, 2)):
        for y in (b, b.transpose(1, 2).contiguous().transpose(1, 2)):
            _close(torch.bmm(x.to("neuron"), y.to("neuron")), torch.bmm(x.float(), y.float()), dtype, k)
    assert torch.neuron.get_fallback_ops() == []


def test_bmm_propagates_nan_and_inf():
    a = torch.randn(3, 8, 8)
    b = torch.randn(3, 8, 8)
    a[0, 2, 3] = float("nan")
    b[1, 4, 5] = float("inf")
    got = torch.bmm(a.to("neuron"), b.to("neuron")).cpu()
    ref = torch.bmm(a, b)
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    finite = ref.isfinite()
    assert torch.allclose(got[finite], ref[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_baddbmm(dtype):
    torch.manual_seed(2)
    a, b = torch.randn(6, 20, 33).to(dtype), torch.randn(6, 33, 40).to(dtype)
    for bias in (torch.randn(6, 20, 40), torch.randn(40), torch.randn(20, 1)):
        bias = bias.to(dtype)
        for alpha, beta in ((1, 1), (0.125, 1), (0.5, 0)):
            got = torch.baddbmm(bias.to("neuron"), a.to("neuron"), b.to("neuron"), alpha=alpha, beta=beta)
            ref = torch.baddbmm(bias.float(), a.float(), b.float(), alpha=alpha, beta=beta)
            _close(got, ref, dtype, 33)
    nan = torch.full((6, 20, 40), float("nan"))
    assert torch.baddbmm(nan.to("neuron"), a.float().to("neuron"), b.float().to("neuron"),
                         beta=0).cpu().isfinite().all()  # beta=0 ignores self, NaN included (as ATen)
    big = torch.randn(2, 140, 600).to(dtype)  # N past one bank: the per-item kernel adds the bias
    a2, b2 = torch.randn(2, 140, 30).to(dtype), torch.randn(2, 30, 600).to(dtype)
    _close(torch.baddbmm(big.to("neuron"), a2.to("neuron"), b2.to("neuron")),
           torch.baddbmm(big.float(), a2.float(), b2.float()), dtype, 30)
    assert torch.neuron.get_fallback_ops() == []
    assert ran_natively("aten::baddbmm")


def test_bmm_declines_what_it_does_not_cover():
    i = torch.ones(2, 4, 4, dtype=torch.int32).to("neuron")
    f = torch.randn(2, 4, 4).to("neuron")
    torch.bmm(i, i)
    torch.baddbmm(f, f, f, beta=0.5)
    assert sorted(torch.neuron.get_fallback_ops()) == ["aten::baddbmm", "aten::bmm"]
    with pytest.raises(RuntimeError):
        torch.bmm(f, torch.randn(3, 4, 4).to("neuron"))  # batch sizes differ: torch's own error


def test_many_small_items_share_one_program_and_few_dmas():
    """train_gpt's attention: 16 items of 16x16. One Program for all of them; a handful of DMAs
    (loads and stores cover the whole batch), not one per item: at most 4 DMA triggers, so the
    per-transfer costs (trigger latency, a queue's issue interval) are paid a few times, not 48."""
    q = torch.empty(16, 16, 16, dtype=torch.bfloat16, device="neuron")
    entry = _entry(aten.bmm.default, q, q.transpose(1, 2))
    prog = entry.prepared.program
    dmas = [i for i in prog.instructions if i.opcode.name.startswith("DMA")]
    assert len(dmas) <= 4
    assert sum(i.opcode.name == "NC_MATMUL" for i in prog.instructions) == 16


def test_bmm_time_scales_with_the_batch():
    chip = settings.chip()
    t = []
    for bs in (16, 64):
        a = torch.empty(bs, 128, 64, dtype=torch.bfloat16, device="neuron")
        t.append(_entry(aten.bmm.default, a, a.transpose(1, 2)).prepared.timeline.total_ns)
    assert t[0] < t[1] < 4 * t[0]
    assert t[1] > 64 * matmul.ideal_ns(128, 64, 128, chip)  # not faster than TensorE can go
