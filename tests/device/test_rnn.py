"""RNNs on the device: PyTorch sends LSTM and GRU cells on any non-CPU device to CUDA's fused cell
kernels, which ATen-CPU lacks; the chokepoint decomposes them (neuronsim/device/decompositions.py)
and they train as on the CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

aten = torch.ops.aten


class Sequence(nn.Module):
    """An RNN over [T, B, F] (or batch-first) with a linear readout."""

    def __init__(self, rnn: nn.Module, hidden: int):
        super().__init__()
        self.rnn, self.readout = rnn, nn.Linear(hidden, 3)

    def forward(self, x):
        out = self.rnn(x)[0]
        return self.readout(out).square().mean()


class Unrolled(nn.Module):
    """A cell unrolled over time by hand, as in seq2seq tutorials."""

    def __init__(self, cell: nn.Module, hidden: int):
        super().__init__()
        self.cell, self.readout, self.hidden = cell, nn.Linear(hidden, 3), hidden

    def forward(self, x):
        state = None
        loss = 0
        for step in x:
            state = self.cell(step, state)
            h = state[0] if isinstance(state, tuple) else state
            loss = loss + self.readout(h).square().mean()
        return loss


MODELS = {
    "LSTM": lambda: Sequence(nn.LSTM(5, 7, num_layers=2), 7),
    "LSTM_bidirectional_batch_first": lambda: Sequence(
        nn.LSTM(5, 7, bidirectional=True, batch_first=True), 14),
    "GRU": lambda: Sequence(nn.GRU(5, 7, num_layers=2), 7),
    "GRU_no_bias": lambda: Sequence(nn.GRU(5, 7, bias=False), 7),
    "LSTMCell": lambda: Unrolled(nn.LSTMCell(5, 7), 7),
    "GRUCell": lambda: Unrolled(nn.GRUCell(5, 7), 7),
}


@pytest.mark.parametrize("name", MODELS)
def test_rnn_trains_like_cpu(name):
    torch.manual_seed(0)
    reference = MODELS[name]()
    model = copy.deepcopy(reference).to("neuron")
    data = torch.randn(6, 4, 5, generator=torch.Generator().manual_seed(1))
    optimizers = {m: torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, model)}
    torch.neuron.clear_op_tracking()
    for _ in range(3):
        losses = {}
        for m, x in ((reference, data), (model, data.to("neuron"))):
            optimizers[m].zero_grad()
            loss = m(x)
            loss.backward()
            losses[m] = loss.item()
        assert losses[model] == pytest.approx(losses[reference], rel=1e-5)
        for (pname, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6, msg=pname)
        for m in (reference, model):
            optimizers[m].step()
    assert not [op for op in torch.neuron.get_fallback_ops() if "thnn" in op]
