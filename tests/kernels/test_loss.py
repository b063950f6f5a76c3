"""nll_loss_forward / nll_loss_backward (and cross_entropy through them) against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively

import neuronsim.kernels.loss  # noqa: F401  (registers the real kernels)

aten = torch.ops.aten
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _dev(*ts):
    return [None if t is None else t.to("neuron") for t in ts]


def _inputs(n, c, dtype, ignore=None, weighted=False, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(n, c).log_softmax(-1).to(dtype)
    t = torch.randint(0, c, (n,))
    if ignore is not None:
        t[::5] = ignore
    w = torch.rand(c).to(dtype) + 0.1 if weighted else None
    return x, t, w


def _tol(dtype, reduction):
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5}
    # one bf16 rounding of an fp32 sum, vs ATen's own accumulation
    return {"rtol": 2**-7, "atol": 2**-7} if reduction != "none" else {"rtol": 0, "atol": 0}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n,c,ignore", [(37, 10, -100), (300, 64, 3), (130, 5000, 4999)])
def test_forward_and_backward_match_cpu(n, c, ignore, weighted, reduction, dtype):
    x, t, w = _inputs(n, c, dtype, ignore, weighted)
    r = REDUCTIONS[reduction]
    out, tw = aten.nll_loss_forward(*_dev(x, t, w), r, ignore)
    assert ran_natively("aten::nll_loss_forward")
    want, want_tw = aten.nll_loss_forward(x, t, w, r, ignore)
    assert_matches_cpu(out, want, **_tol(dtype, reduction))
    assert_matches_cpu(tw, want_tw, **_tol(dtype, reduction))
    g = torch.randn(want.shape).to(dtype)
    grad = aten.nll_loss_backward(*_dev(g, x, t, w), r, ignore, tw)
    assert ran_natively("aten::nll_loss_backward") and torch.neuron.get_fallback_ops() == []
    want_grad = aten.nll_loss_backward(g, x, t, w, r, ignore, want_tw)
    assert_matches_cpu(grad, want_grad, **({"rtol": 2**-7, "atol": 2**-12} if dtype != torch.float32 else {}))


def test_a_one_dim_input_and_a_0dim_target():
    x, t, _ = _inputs(1, 9, torch.float32)
    for target in (t[0], t):
        xs = x[0] if target.dim() == 0 else x
        for r in (0, 1, 2):
            torch.neuron.clear_op_tracking()
            out, tw = aten.nll_loss_forward(*_dev(xs, target), None, r, -100)
            assert ran_natively("aten::nll_loss_forward")
            want, want_tw = aten.nll_loss_forward(xs, target, None, r, -100)
            assert_matches_cpu(out, want)
            assert_matches_cpu(tw, want_tw)


def test_nan_and_inf_in_other_classes_do_not_leak_in():
    x, t, _ = _inputs(20, 8, torch.float32)
    x[torch.arange(20), (t + 1) % 8] = float("nan")
    x[torch.arange(20), (t + 2) % 8] = -float("inf")
    out = aten.nll_loss_forward(*_dev(x, t), None, 1, -100)[0]
    assert_matches_cpu(out, aten.nll_loss_forward(x, t, None, 1, -100)[0])
    x[4, t[4]] = float("nan")  # ... but the target's own NaN does
    assert aten.nll_loss_forward(*_dev(x, t), None, 2, -100)[0].cpu().isnan()


def test_every_row_ignored_gives_nan_mean_and_zero_grad():
    x, t, _ = _inputs(6, 4, torch.float32)
    t[:] = 2
    out, tw = aten.nll_loss_forward(*_dev(x, t), None, 1, 2)
    want, want_tw = aten.nll_loss_forward(x, t, None, 1, 2)
    torch.testing.assert_close(out.cpu(), want, equal_nan=True)
    assert tw.cpu().item() == want_tw.item() == 0
    grad = aten.nll_loss_backward(*_dev(torch.tensor(1.0), x, t), None, 1, 2, tw)
    assert_matches_cpu(grad, torch.zeros(6, 4), rtol=0, atol=0)


@pytest.mark.parametrize("bad", [4, -1])
def test_out_of_range_targets_raise_torchs_error(bad):
    x, t, _ = _inputs(6, 4, torch.float32)
    t[2] = bad
    with pytest.raises(IndexError) as cpu:
        aten.nll_loss_forward(x, t, None, 1, -100)
    with pytest.raises(IndexError) as dev:
        aten.nll_loss_forward(*_dev(x, t), None, 1, -100)
    assert str(dev.value) == str(cpu.value)
    with pytest.raises(RuntimeError, match="Long"):  # int32 targets: ATen's dtype error
        aten.nll_loss_forward(*_dev(x, t.int()), None, 1, -100)


def test_cross_entropy_training_step_is_native():
    torch.manual_seed(1)
    logits = torch.randn(64, 64, requires_grad=True)
    targets = torch.randint(0, 64, (64,))
    F.cross_entropy(logits, targets).backward()
    dev = logits.detach().to("neuron").requires_grad_()
    torch.neuron.clear_op_tracking()
    loss = F.cross_entropy(dev, targets.to("neuron"))
    loss.backward()
    assert ran_natively("aten::nll_loss_forward") and ran_natively("aten::nll_loss_backward")
    assert_matches_cpu(loss, F.cross_entropy(logits.detach(), targets))
    assert_matches_cpu(dev.grad, logits.grad)


def test_a_non_contiguous_input():
    x, t, _ = _inputs(50, 30, torch.float32)
    xt = x.t().contiguous().t()  # column-major [50, 30]
    for r in (0, 1):
        out = aten.nll_loss_forward(*_dev(xt, t), None, r, -100)[0]
        assert_matches_cpu(out, aten.nll_loss_forward(x, t, None, r, -100)[0])
    assert ran_natively("aten::nll_loss_forward")
