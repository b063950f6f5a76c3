"""ATen composites that run as fused kernels on this device: ``scaled_dot_product_attention`` and
``rms_norm``.

Both are CompositeImplicitAutograd: on a backend without a kernel of their own they decompose into
many small ops. The device registers these functions as their kernels (``device/op_table.py``, on
the PrivateUse1 and AutogradPrivateUse1 keys); each routes the calls the fused kernels cover
(``attention.py``, ``norm.py``) to the fused ops and decomposes every other call as before.

This module imports torch only (the device registers it before any family loads). ``rms_norm``
runs its fused ops through ``run``, the device's chokepoint that the device hands it: through the
dispatcher, ``_fused_rms_norm`` (CompositeImplicitAutograd itself) would decompose again.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
_SDP_OVERRIDEABLE = int(torch.nn.attention.SDPBackend.OVERRIDEABLE)


def _is_plain(*tensors) -> bool:
    """Real device tensors, outside any dispatch mode (fake, functional, proxy: those keep the
    composite, as they did before)."""
    return (torch.utils._python_dispatch._get_current_dispatch_mode() is None
            and all(t is None or type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                 scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` as ATen's composite, except for how the backend is chosen.

    The composite asks a C++ dispatch stub, which a Python backend cannot register, so on this device
    it always took the math path. Here the ``_fused_sdp_choice`` op is asked instead (its native
    kernel answers OVERRIDEABLE for the calls the fused attention kernel covers): those run the
    ``_scaled_dot_product_fused_attention_overrideable`` op, whose autograd formula is the fused
    backward; every other call runs the composite as before."""
    if _is_plain(query, key, value, attn_mask) and aten._fused_sdp_choice(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    ) == _SDP_OVERRIDEABLE:
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # as the composite: an additive mask
            mask = attn_mask
            attn_mask = torch.full_like(attn_mask, float("-inf"), dtype=query.dtype)
            attn_mask.masked_fill_(mask, 0.0)
        return aten._scaled_dot_product_fused_attention_overrideable(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]
    return aten.scaled_dot_product_attention.default.decompose(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


class _FusedRmsNorm(torch.autograd.Function):
    """``rms_norm`` as the native ``_fused_rms_norm`` forward and ``_fused_rms_norm_backward``."""

    @staticmethod
    def forward(ctx, run, input, normalized_shape, weight, eps):
        y, rstd = run(aten._fused_rms_norm.default, input, normalized_shape, weight, eps)
        ctx.run, ctx.normalized_shape, ctx.eps = run, normalized_shape, eps
        ctx.save_for_backward(input, rstd, weight)
        return y

    @staticmethod
    def backward(ctx, grad):
        input, rstd, weight = ctx.saved_tensors
        mask = [ctx.needs_input_grad[1], weight is not None and ctx.needs_input_grad[3]]
        if torch.is_grad_enabled():  # create_graph=True: differentiate the composite, twice if asked
            wrt = [t for t, m in zip((input, weight), mask, strict=True) if m]
            with torch.enable_grad():
                y = aten.rms_norm.default.decompose(input, ctx.normalized_shape, weight, ctx.eps)
            grads = iter(torch.autograd.grad(y, wrt, grad, create_graph=True))
            return None, next(grads) if mask[0] else None, None, next(grads) if mask[1] else None, None
        # The kernel reads grad_out row by row; a broadcast one (``y.sum().backward()``) is copied.
        dx, dw = ctx.run(aten._fused_rms_norm_backward.default, grad.contiguous(), input,
                         ctx.normalized_shape, rstd, weight, mask)
        return None, dx, None, dw, None


def rms_norm(run, input, normalized_shape, weight=None, eps=None):
    """``rms_norm`` (CompositeImplicitAutograd: it decomposed into pow / mean / add / rsqrt / mul on
    this device) as one fused kernel each way, for the calls both fused kernels cover (the backward
    has no CPU kernel to fall back to); every other call decomposes as before. ``run(op, *args)``
    runs an ATen op on device tensors (the device's chokepoint)."""
    if _is_plain(input, weight):
        from neuronsim.kernels.norm import rms_norm_uncovered  # loads the simulator: only when needed

        shape = [int(s) for s in normalized_shape]
        if rms_norm_uncovered(input, shape, weight, eps) is None:
            return _FusedRmsNorm.apply(run, input, shape, weight, eps)
    return aten.rms_norm.default.decompose(input, normalized_shape, weight, eps)
