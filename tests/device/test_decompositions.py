"""Ops ATen-CPU has no kernel for are decomposed on the device, never sent to the host: torch's own
decompositions first, then neuronsim's (CUDA's kernels' exact conventions)."""

from __future__ import annotations

import pytest
import torch

from neuronsim.device import decompositions

aten = torch.ops.aten


def test_every_decomposition_we_add_is_for_an_op_the_host_cannot_compute():
    for op in decompositions.DECOMPOSITIONS:
        assert not torch._C._dispatch_has_computed_kernel_for_dispatch_key(op.name(), "CPU"), op


def test_fused_lstm_cell_keeps_cudas_workspace_layout():
    """The workspace holds the activated gates [i, f, c, o], which the backward op reads."""
    g = torch.Generator().manual_seed(2)
    ig, hg = torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g)
    cx = torch.randn(3, 2, generator=g)
    hy, cy, workspace = aten._thnn_fused_lstm_cell(ig.to("neuron"), hg.to("neuron"), cx.to("neuron"))
    i, f, c, o = (ig + hg).chunk(4, 1)
    want = torch.cat([i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()], 1)
    torch.testing.assert_close(workspace.cpu(), want)
    want_cy = f.sigmoid() * cx + i.sigmoid() * c.tanh()
    torch.testing.assert_close(cy.cpu(), want_cy)
    torch.testing.assert_close(hy.cpu(), o.sigmoid() * want_cy.tanh())


def test_an_op_with_torchs_own_decomposition_runs_it():
    x = torch.ones(64, device="neuron")
    out, mask = aten._fused_dropout(x, 0.5)
    assert out.device.type == "neuron" and mask.dtype == torch.uint8  # as CUDA's kernel
    torch.testing.assert_close(out.cpu(), mask.cpu().float() * 2)
    assert 0 < mask.sum().item() < 64


def test_an_op_without_cpu_kernel_or_decomposition_says_so():
    a = torch.ones(2, 2, device="neuron", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match=r"aten::mm\.dtype .*no CPU kernel.*no decomposition"):
        aten.mm.dtype(a, a, torch.float32)
