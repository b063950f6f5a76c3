"""Ops PyTorch routes to this device that ATen-CPU has no kernel for: computed from other ops.

PyTorch's composite code picks some ops for any non-CPU device that only CUDA implements: the RNN
cells (``lstm_cell`` and ``gru_cell`` call the fused ``_thnn_fused_*_cell`` kernels whenever the
input is not on the CPU), dropout's ``_masked_scale``. The host fallback cannot compute them on
ATen-CPU, so the chokepoint runs a decomposition instead, on the device tensors: torch's own
(``torch._decomp``) where it has one, else one of those below. Each follows its CUDA kernel's
conventions exactly (which gates go where, what the workspace holds), because the op's autograd
formula hands the saved workspace to its backward op, which is decomposed here too.
(Source: aten/src/ATen/native/cuda/RNN.cu, the kernels these replace.) They were found by listing
the ATen ops with no CPU kernel (``torch._C._dispatch_has_computed_kernel_for_dispatch_key``) and
reading which of them PyTorch's composites call on a non-CPU device. :func:`histc` covers the one
dtype gap of that kind: CUDA's kernel counts integer tensors, ATen-CPU's does not.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

aten = torch.ops.aten


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """-> (hy, cy, workspace): the gates are [i, f, c, o] along dim 1; the workspace keeps them
    activated, in that order, for the backward."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + (input_bias + hidden_bias)
    i, f, c, o = gates.chunk(4, 1)
    i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
    cy = f * cx + i * c
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, c, o], 1)


def _lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """-> (grad_gates, grad_cx, grad_bias); all undefined when neither gradient is."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, c, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_o = grad_hy * tanh_cy if grad_hy is not None else torch.zeros_like(cy)
    grad_c_total = grad_hy * o * (1 - tanh_cy * tanh_cy) if grad_hy is not None else torch.zeros_like(cy)
    if grad_cy is not None:
        grad_c_total = grad_c_total + grad_cy
    grad_gates = torch.cat([
        grad_c_total * c * (1 - i) * i,
        grad_c_total * cx * (1 - f) * f,
        grad_c_total * i * (1 - c * c),
        grad_o * (1 - o) * o,
    ], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c_total * f, grad_bias


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """-> (hy, workspace): gates [r, i, n] along dim 1; the workspace keeps r, i, n, hx and the
    hidden n-gate with its bias."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    in_r, in_i, in_n = input_gates.chunk(3, 1)
    h_r, h_i, h_n = hidden_gates.chunk(3, 1)
    r = (in_r + h_r).sigmoid()
    i = (in_i + h_i).sigmoid()
    n = (in_n + r * h_n).tanh()
    hy = n + i * (hx - n)
    return hy, torch.cat([r, i, n, hx, h_n], 1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    """-> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    r, i, n, hx, h_n = workspace.chunk(5, 1)
    grad_i = grad_hy * (hx - n) * (1 - i) * i
    grad_in_n = grad_hy * (1 - i) * (1 - n * n)
    grad_r = grad_in_n * h_n * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_i, grad_in_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_i, grad_in_n * r], 1)
    if has_bias:
        return (grad_input_gates, grad_hidden_gates, grad_hy * i,
                grad_input_gates.sum(0), grad_hidden_gates.sum(0))
    return grad_input_gates, grad_hidden_gates, grad_hy * i, None, None


def _masked_scale(self, mask, scale):
    return self * mask * scale


DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable] = {
    aten._thnn_fused_lstm_cell.default: _lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward_impl,
    aten._thnn_fused_gru_cell.default: _gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
    aten._masked_scale.default: _masked_scale,
}


def histc(self, bins=100, min=0, max=0):
    """``histc`` as CUDA computes it. CUDA's kernel counts integer tensors (MoE routers count tokens
    per expert this way); ATen-CPU's takes floating types only and raises for them. Integer inputs
    are counted in float64 with the 64-bit policy off, which holds the values and CUDA's integer
    bin arithmetic exactly (float32 would misplace large values), with ``min``/``max`` truncated to
    integers as CUDA does; the counts come back in the input's dtype, as CUDA's do. Floating
    inputs are the device's ordinary ``histc``. The native kernel takes integer inputs first."""
    from neuronsim.device.dispatch import execute

    if self.is_floating_point() or self.is_complex():
        return execute(aten.histc.default, self, bins, min, max)
    from neuronsim.device.dispatch import run_native

    counts = run_native(aten.histc.default, self, bins, min, max)  # kernels/scatter.py: CUDA's formula
    if counts is not NotImplemented:
        return counts
    from neuronsim.options import options

    with options(cast_64bit=False):
        counts = aten.histc.default(self.to(torch.float64), bins, int(min), int(max))
    return counts.to(self.dtype)


def decomposition(op: torch._ops.OpOverload) -> Callable | None:
    """How to compute ``op`` from other ops when ATen-CPU cannot: torch's decomposition, else ours."""
    from torch._decomp import decomposition_table

    return decomposition_table.get(op) or DECOMPOSITIONS.get(op)
