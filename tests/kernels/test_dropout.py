"""Dropout kernels (kernels/dropout.py): native_dropout's mask from the VectorE PRNG, its result
against ATen's formula on that mask, the seed's reproducibility, and native_dropout_backward."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively

from neuronsim.device import native
from neuronsim.options import options

aten = torch.ops.aten
FWD, BWD = "aten::native_dropout", "aten::native_dropout_backward"


def _x(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def _expected(x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """ATen's native_dropout on a given mask: ``input * mask * (1 / (1 - p))``."""
    return x * mask * (0.0 if p == 1 else 1.0 / (1.0 - p))


def _dropout(x_cpu, p, train=True):
    y, mask = aten.native_dropout(x_cpu.to("neuron"), p, train)
    return y.cpu(), mask.cpu()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(300, 70), (7,), (4, 8, 33), (2048, 130)])
def test_result_is_x_times_mask_times_scale_exactly(dtype, shape):
    x = _x(shape, dtype)
    x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0]).to(dtype)
    y, mask = _dropout(x, 0.3)
    assert ran_natively(FWD)
    assert mask.dtype == torch.bool and mask.shape == x.shape and y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y, _expected(x, mask, 0.3), rtol=0, atol=0, equal_nan=True)
    real = ~torch.isnan(y)  # a NaN's sign bit is no value (x86 makes inf * 0 a negative NaN)
    assert torch.equal(torch.signbit(y)[real], torch.signbit(_expected(x, mask, 0.3))[real])  # -0.0 kept


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_fraction_is_within_a_statistical_bound(p):
    n = 128 * 512
    _, mask = _dropout(torch.ones(n), p)
    keep = mask.float().mean().item()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(keep - (1 - p)) < 5 * sigma + 2**-16, (keep, 1 - p)  # 2**-16: the threshold's resolution
    per_row = mask.view(128, 512).float().mean(dim=1)  # no partition or column is special
    per_col = mask.view(128, 512).float().mean(dim=0)
    assert per_row.std() < 3 * math.sqrt(p * (1 - p) / 512)
    assert per_col.std() < 3 * math.sqrt(p * (1 - p) / 128)


def test_manual_seed_repeats_the_masks_and_successive_calls_differ():
    x = _x((64, 96))
    torch.manual_seed(1234)
    first = [_dropout(x, 0.5)[1] for _ in range(3)]
    torch.manual_seed(1234)
    second = [_dropout(x, 0.5)[1] for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    torch.manual_seed(1235)
    assert not torch.equal(_dropout(x, 0.5)[1], first[0])
    entries = [e for e in native.entries("aten::native_dropout.default").values()
               if not native.is_declined(e) and e.signature == ((torch.float32, x.shape),)]
    assert len(entries) == 1, "one Program for every call of a signature (the seed is a runtime operand)"


def test_non_contiguous_and_broadcast_views():
    base = _x((40, 64))
    x = base.to("neuron").t()[::2]  # (32, 40) view, strides (2, 64)
    y, mask = aten.native_dropout(x, 0.25, True)
    assert ran_natively(FWD)
    torch.testing.assert_close(y.cpu(), _expected(x.cpu(), mask.cpu(), 0.25), rtol=0, atol=0)
    e = _x((1, 50)).to("neuron").expand(16, 50)
    y, mask = aten.native_dropout(e, 0.5, True)
    torch.testing.assert_close(y.cpu(), _expected(e.cpu(), mask.cpu(), 0.5), rtol=0, atol=0)
    assert mask.float().mean().item() not in (0.0, 1.0) and not torch.equal(mask[0].cpu(), mask[1].cpu())


def test_p_zero_keeps_everything_p_one_drops_everything():
    x = _x((33, 17))
    y, mask = _dropout(x, 0.0)
    assert mask.all() and torch.equal(y, x)
    y, mask = _dropout(x, 1.0)
    assert not mask.any() and torch.equal(y, torch.zeros_like(x))  # ATen's x * 0 * 0 (finite x)


def test_what_is_declined_runs_on_the_host():
    x = _x((8, 8)).to("neuron")
    y, mask = aten.native_dropout(x, 0.5, False)  # eval: ATen's clone and all-true mask
    assert torch.equal(y.cpu(), x.cpu()) and mask.all()
    aten.native_dropout(x.half(), 0.5, True)
    assert FWD in torch.neuron.get_fallback_ops()
    with pytest.raises(RuntimeError):
        aten.native_dropout(torch.ones(3, dtype=torch.int32, device="neuron"), 0.5, True)


def test_fast_numerics_still_draws_the_kernels_mask():
    """Under fast numerics the Program runs anyway: one seed, one mask, in both modes."""
    x = _x((128, 40))
    torch.manual_seed(5)
    exact = _dropout(x, 0.5)
    with options(numerics="fast"):
        torch.manual_seed(5)
        fast = _dropout(x, 0.5)
    assert torch.equal(exact[0], fast[0]) and torch.equal(exact[1], fast[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_is_grad_times_mask_times_scale(dtype):
    g, mask = _x((100, 30), dtype, seed=1), _x((100, 30), seed=2) > 0
    out = aten.native_dropout_backward(g.to("neuron"), mask.to("neuron"), 1 / 0.7)
    assert ran_natively(BWD)
    torch.testing.assert_close(out.cpu(), aten.native_dropout_backward(g, mask, 1 / 0.7), rtol=0, atol=0)


def test_nn_dropout_training_step_gradient_is_mask_times_scale():
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32).to("neuron")
    drop = torch.nn.Dropout(0.2).train()
    x = torch.randn(16, 32, device="neuron")
    h = lin(x).detach().requires_grad_()
    out = drop(h)
    out.sum().backward()
    assert ran_natively(FWD) and ran_natively(BWD)
    mask = out.detach().cpu() != 0
    torch.testing.assert_close(h.grad.cpu(), mask.float() * (1 / 0.8), rtol=0, atol=0)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    loss = F.dropout(lin(x), 0.2, training=True).pow(2).mean()
    loss.backward()
    opt.step()
    assert all(p.grad is not None and torch.isfinite(p.grad.cpu()).all() for p in lin.parameters())
    assert FWD not in torch.neuron.get_fallback_ops() and BWD not in torch.neuron.get_fallback_ops()


def test_device_time_scales_with_bytes():
    """The Program's time grows with the tensor (VectorE: 3N cycles per tile, DMA bytes) and bf16 moves
    fewer bytes than fp32."""
    def ns(shape, dtype):
        aten.native_dropout(torch.empty(shape, dtype=dtype, device="neuron"), 0.1, True)
        found = [e for k, e in native.entries("aten::native_dropout.default").items()
                 if not native.is_declined(e) and e.signature == ((dtype, torch.Size(shape)),)]
        return found[0].prepared.timeline.total_ns
    small, big = ns((256, 512), torch.float32), ns((1024, 1024), torch.float32)
    assert 3 < big / small < 10  # 8x the bytes; DMA trigger latencies and compute latencies do not scale
    assert ns((1024, 1024), torch.bfloat16) < big


def test_train_gpt_with_dropout_runs_natively():
    """examples/train_gpt.py --dropout 0.1: dropout forward and backward run on the device, and the
    seeded run repeats its losses exactly."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_gpt

    args = ["--steps", "2", "--batch", "2", "--block", "16", "--quiet", "--device", "neuron",
            "--dropout", "0.1"]
    losses = train_gpt.main(args)
    assert ran_natively(FWD) and ran_natively(BWD)
    assert not torch.neuron.get_fallback_ops()
    assert losses == train_gpt.main(args)
    assert losses != train_gpt.main([*args[:-1], "0.0"])
