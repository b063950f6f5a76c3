"""rms_norm on the device: one fused ``_fused_rms_norm`` kernel forward and one
``_fused_rms_norm_backward`` backward (routed by the op table), against ATen-CPU's composite."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively

from neuronsim.device import clock
from neuronsim.device.dispatch import execute
from neuronsim.device.native import entries, is_declined

aten = torch.ops.aten
FWD, BWD = "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"
CASES = [((3, 100, 64), [64]), ((4, 6, 40), [6, 40])]  # 300 rows (partial tiles); two normalized dims


def _leaf(t, on_device):
    if t is None:
        return None
    return (t.to("neuron") if on_device else t.clone()).requires_grad_()


def _run(x, shape, w, eps, dy, on_device):
    """(y, x.grad, w.grad) of ``F.rms_norm`` on the device or the host."""
    xl, wl = _leaf(x, on_device), _leaf(w, on_device)
    y = F.rms_norm(xl, shape, wl, eps)
    y.backward(dy.to(y.device))
    return y, xl.grad, None if wl is None else wl.grad


def _grad_tol(dtype):
    # Gradients sum over the row (dx) or over all rows (dw) in fp32, in another order than ATen.
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}


def _inputs(shape, dtype, seed=0, scale=1.0):
    torch.manual_seed(seed)
    x = (torch.randn(shape) * scale + 0.1).to(dtype)
    return x, torch.randn(shape[-1]).to(dtype), torch.randn(shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_weight", [True, False])
@pytest.mark.parametrize(("shape", "normalized"), CASES)
def test_forward_and_backward_match_cpu(shape, normalized, dtype, with_weight):
    torch.manual_seed(0)
    x, dy = (torch.randn(shape) * 2 + 0.3).to(dtype), torch.randn(shape).to(dtype)
    w = torch.randn(normalized).to(dtype) if with_weight else None
    got = _run(x, normalized, w, 1e-5, dy, on_device=True)
    assert ran_natively(FWD) and ran_natively(BWD)
    assert torch.neuron.get_fallback_ops() == []
    assert "aten::rsqrt" not in torch.neuron.get_executed_ops()  # nothing decomposed
    want = _run(x, normalized, w, 1e-5, dy, on_device=False)
    assert_matches_cpu(got[0], want[0])
    for g, e in zip(got[1:], want[1:], strict=True):
        if e is None:
            assert g is None
        else:
            assert_matches_cpu(g, e, **_grad_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rstd_is_fp32_per_row_as_atens_fused_op(dtype):
    """``_fused_rms_norm``'s (y, rstd): rstd float32 with the normalized dims kept as 1 (its meta)."""
    x, _, _ = _inputs((5, 6, 40), dtype)
    y, rstd = execute(aten._fused_rms_norm.default, x.to("neuron"), [6, 40], None, 1e-6)
    assert ran_natively(FWD)
    ref_y, ref_rstd = aten._fused_rms_norm(x, [6, 40], None, 1e-6)  # CPU: the composite
    assert rstd.shape == ref_rstd.shape == (5, 1, 1) and rstd.dtype == ref_rstd.dtype == torch.float32
    assert_matches_cpu(y, ref_y)
    assert_matches_cpu(rstd, ref_rstd, rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [None, 0.25])
def test_eps_none_is_the_compute_dtypes_and_a_given_eps_is_used(dtype, eps):
    """Small inputs (mean square ~1e-4) so that eps shows: None means fp32's epsilon even for bf16
    (the composite upcasts; bf16's own 2^-7 would change the result by far more than the tolerance)."""
    x, w, dy = _inputs((7, 130), dtype, seed=1, scale=1e-2)
    got = _run(x, [130], w, eps, dy, on_device=True)
    assert ran_natively(FWD) and ran_natively(BWD)
    want = _run(x, [130], w, eps, dy, on_device=False)
    for g, e in zip(got, want, strict=True):
        assert_matches_cpu(g, e, **_grad_tol(dtype))


def test_a_medium_shape_over_many_row_tiles():
    x, w, dy = _inputs((2, 300, 1024), torch.bfloat16, seed=2)
    got = _run(x, [1024], w, None, dy, on_device=True)
    assert ran_natively(FWD) and ran_natively(BWD)
    for g, e in zip(got, _run(x, [1024], w, None, dy, on_device=False), strict=True):
        assert_matches_cpu(g, e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_longest_covered_row(dtype):
    """N_MAX elements per row: the backward's tiles (two row tiles in flight) still fit SBUF."""
    from neuronsim.kernels.norm import N_MAX

    x, w, dy = _inputs((130, N_MAX), dtype, seed=12)
    got = _run(x, [N_MAX], w, 1e-6, dy, on_device=True)
    assert ran_natively(FWD) and ran_natively(BWD)
    want = _run(x, [N_MAX], w, 1e-6, dy, on_device=False)
    tol = _grad_tol(dtype) if dtype == torch.float32 else {"rtol": 2**-9, "atol": 2**-9}
    assert_matches_cpu(got[0], want[0], **tol)
    assert_matches_cpu(got[1], want[1], **tol)
    # grad_weight sums 130 rows of products in fp32 before one rounding; ATen-CPU rounds the same sum
    assert_matches_cpu(got[2], want[2], rtol=2**-8, atol=2**-6)


def test_gradient_for_only_one_of_input_and_weight():
    x, w, dy = _inputs((50, 96), torch.float32, seed=3)
    xd, wd = x.to("neuron"), w.to("neuron").requires_grad_()  # the input needs no gradient
    F.rms_norm(xd, [96], wd).backward(dy.to("neuron"))
    wc = w.clone().requires_grad_()
    F.rms_norm(x, [96], wc).backward(dy)
    assert ran_natively(BWD)
    assert_matches_cpu(wd.grad, wc.grad, **_grad_tol(torch.float32))
    torch.neuron.clear_op_tracking()
    xd = x.to("neuron").requires_grad_()
    F.rms_norm(xd, [96], w.to("neuron")).backward(dy.to("neuron"))  # the weight needs none
    xc = x.clone().requires_grad_()
    F.rms_norm(xc, [96], w).backward(dy)
    assert ran_natively(BWD)
    assert_matches_cpu(xd.grad, xc.grad, **_grad_tol(torch.float32))


def test_a_broadcast_output_gradient():
    """``y.sum().backward()`` hands the backward an expanded (stride 0) gradient."""
    x, w, _ = _inputs((20, 48), torch.bfloat16, seed=4)
    xd, xc = x.to("neuron").requires_grad_(), x.clone().requires_grad_()
    F.rms_norm(xd, [48], w.to("neuron")).float().sum().backward()
    F.rms_norm(xc, [48], w).float().sum().backward()
    assert ran_natively(BWD)
    assert_matches_cpu(xd.grad, xc.grad)


def test_a_second_derivative_through_the_composite():
    """create_graph=True: the backward differentiates the composite, so a gradient penalty works."""
    x, w, _ = _inputs((6, 32), torch.float32, seed=15)
    results = []
    for xl, wl in ((x.to("neuron"), w.to("neuron")), (x.clone(), w.clone())):
        xl.requires_grad_(), wl.requires_grad_()
        (dx,) = torch.autograd.grad(F.rms_norm(xl, [32], wl).pow(2).sum(), xl, create_graph=True)
        dx.pow(2).sum().backward()
        results.append((dx, xl.grad, wl.grad))
    assert ran_natively(FWD)
    for g, e in zip(*results, strict=True):
        assert_matches_cpu(g.detach(), e.detach(), rtol=1e-4, atol=1e-4)


def test_no_grad_and_nan_inf_rows():
    x, w, _ = _inputs((9, 64), torch.float32, seed=5)
    x[2, 3], x[5, 0] = float("nan"), float("inf")
    with torch.no_grad():
        y = F.rms_norm(x.to("neuron"), [64], w.to("neuron"))
    assert ran_natively(FWD)
    assert_matches_cpu(y, F.rms_norm(x, [64], w), equal_nan=True)


def test_inference_mode_takes_the_fused_kernel_too():
    """Below autograd (inference_mode) the op table's PrivateUse1 registration routes it."""
    x, w, _ = _inputs((10, 64), torch.float32, seed=13)
    with torch.inference_mode():
        y = F.rms_norm(x.to("neuron"), [64], w.to("neuron"))
    assert ran_natively(FWD) and not torch.neuron.get_fallback_ops()
    assert_matches_cpu(y, F.rms_norm(x, [64], w))


def _check_decomposes(x, shape, w, dy, tol):
    got = _run(x, shape, w, None, dy, on_device=True)
    ops = torch.neuron.get_executed_ops() + torch.neuron.get_fallback_ops()
    assert not any("rms_norm" in op for op in ops) and "aten::rsqrt" in ops
    for g, e in zip(got, _run(x, shape, w, None, dy, on_device=False), strict=True):
        if e is not None:
            assert_matches_cpu(g, e, **tol)


def test_a_non_contiguous_input_decomposes_and_matches():
    x, w, _ = _inputs((64, 40), torch.float32, seed=6)
    x = x.t()  # [40, 64], rows strided
    _check_decomposes(x, [64], torch.randn(64), torch.randn(40, 64), _grad_tol(torch.float32))


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_uncovered_calls_decompose_and_match():
    x, w, dy = _inputs((3, 5000), torch.float32, seed=7)  # a row too long for SBUF
    _check_decomposes(x, [5000], w, dy, _grad_tol(torch.float32))
    torch.neuron.clear_op_tracking()
    x, w, dy = _inputs((6, 32), torch.bfloat16, seed=8)  # a weight of another dtype than the input
    _check_decomposes(x, [32], w.float(), dy, {"rtol": 2**-6, "atol": 2**-6})


def test_invalid_arguments_raise_torchs_error():
    x, w, _ = _inputs((4, 16), torch.float32)
    with pytest.raises(RuntimeError) as want:
        F.rms_norm(x, [8], w)
    with pytest.raises(RuntimeError) as got:
        F.rms_norm(x.to("neuron"), [8], w.to("neuron"))
    assert str(got.value) == str(want.value)


def test_rms_norm_module_training_step_matches_cpu():
    torch.manual_seed(9)
    cpu = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.RMSNorm(48), torch.nn.Linear(48, 8))
    dev = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.RMSNorm(48), torch.nn.Linear(48, 8))
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x, target = torch.randn(130, 32), torch.randn(130, 8)
    for model, xb, tb in ((cpu, x, target), (dev, x.to("neuron"), target.to("neuron"))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        F.mse_loss(model(xb), tb).backward()
        opt.step()
    assert ran_natively(FWD) and ran_natively(BWD)
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters(), strict=True):
        assert_matches_cpu(p.detach(), q.detach(), rtol=1e-4, atol=1e-5), name


def _device_ns(fn) -> float:
    events = clock.clock(0).events
    before = len(events())
    fn()
    return sum(e.duration_ns for e in events()[before:])


def test_the_fused_kernels_take_less_device_time_than_the_decomposition():
    x, w, dy = (t.to("neuron") for t in _inputs((512, 1024), torch.bfloat16, seed=10))
    x.requires_grad_(), w.requires_grad_()

    def fused():
        F.rms_norm(x, [1024], w, 1e-6).backward(dy)

    def decomposed():
        aten.rms_norm.default.decompose(x, [1024], w, 1e-6).backward(dy)

    fused(), decomposed()  # first calls trace and schedule
    fwd_fused = _device_ns(lambda: F.rms_norm(x.detach(), [1024], w.detach(), 1e-6))
    fwd_decomposed = _device_ns(lambda: aten.rms_norm.default.decompose(x.detach(), [1024], w.detach(), 1e-6))
    both_fused, both_decomposed = _device_ns(fused), _device_ns(decomposed)
    assert 0 < fwd_fused < 0.5 * fwd_decomposed
    assert 0 < both_fused < 0.5 * both_decomposed


def _kernel_ns(name, rows, n):
    (entry,) = [e for e in entries(name).values()
                if not is_declined(e) and e.signature[0] == (torch.bfloat16, torch.Size((rows, n)))]
    return entry.duration_ns


def test_simulated_time_scales_with_the_rows():
    """The kernels stream the rows: 4x the rows costs more than 1.5x and at most 4.5x, forward and backward
    (512 rows are four tiles: the first load's latency and the activation-table load do not scale)."""
    for rows in (512, 2048):
        x, w, dy = (t.to("neuron") for t in _inputs((rows, 512), torch.bfloat16, seed=14))
        F.rms_norm(x.requires_grad_(), [512], w.requires_grad_()).backward(dy)
    for name in (FWD, BWD):
        small, large = _kernel_ns(name + ".default", 512, 512), _kernel_ns(name + ".default", 2048, 512)
        assert 1.5 < large / small < 4.5, name


def test_compile_of_a_module_with_rms_norm():
    """AOTAutograd decomposes rms_norm itself (fake tensors: the op table keeps the composite)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.RMSNorm(32))
    x = torch.randn(20, 16)
    want = model(x)
    model.to("neuron")
    got = torch.compile(model, backend="neuron")(x.to("neuron"))
    assert_matches_cpu(got.detach(), want.detach(), rtol=1e-4, atol=1e-5)
    got.sum().backward()
    assert model[1].weight.grad is not None
