"""native_layer_norm forward and backward against ATen-CPU; RMSNorm's dispatch on the device."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively

import neuronsim.kernels.norm  # noqa: F401  (registers the real kernels before the manifest lists them)

aten = torch.ops.aten
SHAPES = [(2, 3, 64), (3, 100, 768), (2, 70, 4096)]  # 6, 300 and 140 rows: partial row tiles


def _inputs(shape, dtype, seed=0):
    torch.manual_seed(seed)
    c = shape[-1]
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    return x, torch.randn(c).to(dtype), torch.randn(c).to(dtype), torch.randn(shape).to(dtype)


def _dev(*ts):
    return [None if t is None else t.to("neuron") for t in ts]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["weight_bias", "weight", "none"])
def test_forward_matches_cpu(shape, dtype, affine):
    x, w, b, _ = _inputs(shape, dtype)
    w = w if affine != "none" else None
    b = b if affine == "weight_bias" else None
    c = shape[-1]
    y, mean, rstd = aten.native_layer_norm(*_dev(x), [c], *_dev(w, b), 1e-5)
    assert ran_natively("aten::native_layer_norm")
    assert torch.neuron.get_fallback_ops() == []
    ref = aten.native_layer_norm(x, [c], w, b, 1e-5)
    assert_matches_cpu(y, ref[0])
    # mean/rstd: in the input's dtype, as ATen-CPU returns them (meta/CUDA say float32), rounded
    # once from the fp32 statistics.
    ref32 = aten.native_layer_norm(x.float(), [c], None, None, 1e-5)
    for got, want in zip((mean, rstd), ref32[1:], strict=True):
        assert got.shape == (*shape[:-1], 1) and got.dtype == dtype == ref[1].dtype
        assert_matches_cpu(got, want.to(dtype), rtol=1e-5, atol=1e-6)


def test_forward_over_two_normalized_dims():
    x, *_ = _inputs((4, 6, 40), torch.float32)
    w, b = torch.randn(6, 40), torch.randn(6, 40)
    y, mean, rstd = aten.native_layer_norm(*_dev(x), [6, 40], *_dev(w, b), 1e-3)
    ref = aten.native_layer_norm(x, [6, 40], w, b, 1e-3)
    assert ran_natively("aten::native_layer_norm")
    assert mean.shape == (4, 1, 1)
    for got, want in zip((y, mean, rstd), ref, strict=True):
        assert_matches_cpu(got, want)


def _grad_tolerance(dtype, c):
    # grad_weight/bias sum rows in another order; bf16 results round once (ATen too, from fp32).
    return {"rtol": 1e-4, "atol": 1e-5 * c**0.5} if dtype == torch.float32 else {"rtol": 2**-6, "atol": 2**-5}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_autograd_backward_matches_cpu(shape, dtype):
    x, w, b, dy = _inputs(shape, dtype)
    c = shape[-1]
    # The reference is ATen-CPU's backward in fp32 from mean/rstd rounded to the input's dtype, as
    # the forward returns them (ATen-CPU's own bf16 backward also sums the weight grads in bf16).
    x32 = x.float()
    _, mean, rstd = aten.native_layer_norm(x32, [c], None, None, 1e-5)
    mean, rstd = mean.to(dtype).float(), rstd.to(dtype).float()
    grads = aten.native_layer_norm_backward(dy.float(), x32, [c], mean, rstd, w.float(), b.float(),
                                            [True] * 3)
    leaves = [types.SimpleNamespace(grad=g) for g in grads]
    dleaves = [t.to("neuron").requires_grad_() for t in (x, w, b)]
    torch.neuron.clear_op_tracking()
    y = F.layer_norm(dleaves[0], (c,), dleaves[1], dleaves[2])
    y.backward(dy.to("neuron"))
    assert ran_natively("aten::native_layer_norm") and ran_natively("aten::native_layer_norm_backward")
    assert "aten::native_layer_norm_backward" not in torch.neuron.get_fallback_ops()
    for got, want in zip(dleaves, leaves, strict=True):
        assert_matches_cpu(got.grad, want.grad.to(dtype), **_grad_tolerance(dtype, c))


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_kernel_directly(dtype):
    """The op with a full output_mask, the mean/rstd of the device's forward, and bf16 inputs."""
    x, w, b, dy = _inputs((5, 77, 200), dtype, seed=1)
    _, mean, rstd = aten.native_layer_norm(x.float(), [200], None, None, 1e-5)
    got = aten.native_layer_norm_backward(*_dev(dy, x), [200], *_dev(mean, rstd, w, b), [True, True, True])
    assert ran_natively("aten::native_layer_norm_backward")
    want = aten.native_layer_norm_backward(dy.float(), x.float(), [200], mean, rstd, w.float(), b.float(),
                                           [True, True, True])
    for g, r in zip(got, want, strict=True):
        assert_matches_cpu(g, r.to(dtype), **_grad_tolerance(dtype, 200))


def test_uncovered_signatures_fall_back_and_stay_correct():
    # Rows longer than N_MAX, and normalized dims that are not one walk: the host computes them.
    x = torch.randn(3, 8192)
    y, *_ = aten.native_layer_norm(x.to("neuron"), [8192], None, None, 1e-5)
    assert_matches_cpu(y, aten.native_layer_norm(x, [8192], None, None, 1e-5)[0])
    xt = torch.randn(8, 4, 16)
    y, *_ = aten.native_layer_norm(xt.to("neuron").transpose(0, 2), [4, 8], None, None, 1e-5)
    assert_matches_cpu(y, aten.native_layer_norm(xt.transpose(0, 2), [4, 8], None, None, 1e-5)[0])
    assert torch.neuron.get_fallback_ops() == ["aten::native_layer_norm"]
    assert not ran_natively("aten::native_layer_norm")


def test_masked_backward_is_correct():
    """No weight: autograd asks for grad_input only (output_mask [True, False, False])."""
    x, _, _, dy = _inputs((3, 50, 96), torch.float32)
    xc = x.clone().requires_grad_()
    F.layer_norm(xc, (96,)).backward(dy)
    xd = x.to("neuron").requires_grad_()
    F.layer_norm(xd, (96,)).backward(dy.to("neuron"))
    assert ran_natively("aten::native_layer_norm")
    assert_matches_cpu(xd.grad, xc.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("affine", ["weight", "none"])
def test_backward_without_bias_runs_natively(affine):
    """nanoGPT's ``LayerNorm(bias=False)`` asks for (grad_input, grad_weight) and no grad_bias; no
    affine asks for grad_input only: the meta kernel's results hold Nones, which the kernel keeps."""
    x, w, _, dy = _inputs((4, 33, 160), torch.float32, seed=2)
    w = w if affine == "weight" else None
    leaves = [t.clone().requires_grad_() for t in (x, w) if t is not None]
    F.layer_norm(leaves[0], (160,), *leaves[1:]).backward(dy)
    dleaves = [t.to("neuron").requires_grad_() for t in (x, w) if t is not None]
    F.layer_norm(dleaves[0], (160,), *dleaves[1:]).backward(dy.to("neuron"))
    assert ran_natively("aten::native_layer_norm_backward")
    assert torch.neuron.get_fallback_ops() == []
    for got, want in zip(dleaves, leaves, strict=True):
        assert_matches_cpu(got.grad, want.grad, **_grad_tolerance(torch.float32, 160))


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_of_a_broadcast_gradient(dtype):
    """``y.sum().backward()`` hands the backward an expanded (all strides 0) gradient: the kernel
    reads it through a stride-0 pattern instead of falling back."""
    x, w, b, _ = _inputs((3, 130, 96), dtype, seed=3)
    # The reference: ATen-CPU's fp32 backward from mean/rstd rounded as the forward returns them.
    _, mean, rstd = aten.native_layer_norm(x.float(), [96], None, None, 1e-5)
    mean, rstd = mean.to(dtype).float(), rstd.to(dtype).float()
    want = aten.native_layer_norm_backward(torch.ones(x.shape), x.float(), [96], mean, rstd, w.float(),
                                           b.float(), [True] * 3)
    dleaves = [t.to("neuron").requires_grad_() for t in (x, w, b)]
    F.layer_norm(dleaves[0], (96,), *dleaves[1:]).sum().backward()
    assert ran_natively("aten::native_layer_norm_backward")
    assert torch.neuron.get_fallback_ops() == []
    for got, ref in zip(dleaves, want, strict=True):
        assert_matches_cpu(got.grad, ref.to(dtype), **_grad_tolerance(dtype, 96))


def test_row_walk_of_views():
    from neuronsim.kernels.norm import row_walk

    assert row_walk([torch.empty(3, 5, 40)], 40) == [(0, 15, (0,), (40,), (1,))]
    assert row_walk([torch.empty(()).expand(3, 5, 40)], 40) == [(0, 15, (0,), (0,), (0,))]
    # rows that are not one walk: a tile per outer index
    assert row_walk([torch.empty(3, 1, 40).expand(3, 5, 40)], 40) == [
        (0, 5, (0,), (0,), (1,)), (5, 5, (40,), (0,), (1,)), (10, 5, (80,), (0,), (1,))]
    assert row_walk([torch.empty(2, 6, 40)], 240) == [(0, 2, (0,), (240,), (1,))]
    assert row_walk([torch.empty(40, 6).t()], 40) == [(0, 6, (0,), (1,), (6,))]
    assert row_walk([torch.empty(4, 6)], 5) is None


@pytest.mark.parametrize("shape", [(2, 32, 16), (2, 8, 8, 8)])
def test_layer_norm_of_a_transposed_input(shape):
    """ConvNeXt / wav2vec2 / Whisper normalize a ``[B, C, T]`` conv output transposed to ``[B, T, C]``."""
    torch.manual_seed(9)
    x0, n = torch.randn(shape), shape[1]
    w0, b0 = torch.randn(n), torch.randn(n)

    def run(device):
        x, w, b = (t.clone().to(device).requires_grad_() for t in (x0, w0, b0))
        y = F.layer_norm(x.transpose(1, -1), (n,), w, b, 1e-5)
        (y * torch.linspace(-1, 1, y.numel(), device=device).view(y.shape)).sum().backward()
        return y, x.grad, w.grad, b.grad

    want = run("cpu")
    got = run("neuron")
    assert ran_natively("aten::native_layer_norm") and ran_natively("aten::native_layer_norm_backward")
    for g, ref in zip(got, want, strict=True):
        assert_matches_cpu(g, ref.detach(), rtol=1e-4, atol=1e-4)


def test_layer_norm_of_an_empty_16_bit_input_keeps_its_dtypes():
    x, w = torch.empty(0, 1, dtype=torch.bfloat16), torch.ones(1, dtype=torch.bfloat16)
    got = aten.native_layer_norm(x.to("neuron"), [1], w.to("neuron"), w.to("neuron"), 1e-5)
    want = aten.native_layer_norm(x, [1], w, w, 1e-5)
    assert [t.dtype for t in got] == [t.dtype for t in want]
    assert [t.shape for t in got] == [t.shape for t in want]
