"""The fused LSTM and GRU cells as native kernels (``kernels/rnn.py``): the modules' forward and
backward on ``neuron`` against the CPU, with and without biases, the fused ops run by the simulator."""

from __future__ import annotations

import pytest
import torch

import neuronsim.kernels.rnn  # noqa: F401  (its real kernels, before the manifest lists them)


def _compare(cpu_module, make_inputs, upstream):
    torch.manual_seed(3)
    dev_module = cpu_module.__class__(**cpu_module.kwargs)
    dev_module.load_state_dict(cpu_module.state_dict())
    dev_module = dev_module.to("neuron")
    inputs = make_inputs()
    dev_inputs = [t.detach().to("neuron").requires_grad_(t.requires_grad) for t in inputs]
    want = upstream(cpu_module(*inputs))
    got = upstream(dev_module(*dev_inputs))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    want.backward()
    got.backward()
    for (name, p), q in zip(cpu_module.named_parameters(), dev_module.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for t, d in zip(inputs, dev_inputs, strict=True):
        if t.requires_grad:
            torch.testing.assert_close(d.grad.cpu(), t.grad, rtol=1e-4, atol=1e-5)


class _Cell(torch.nn.Module):
    def __init__(self, kind: str, bias: bool, hidden: int):
        super().__init__()
        self.kwargs = {"kind": kind, "bias": bias, "hidden": hidden}
        cls = torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell
        self.cell = cls(12, hidden, bias=bias)
        self.kind = kind

    def forward(self, x, h, c):
        if self.kind == "lstm":
            h, c = self.cell(x, (h, c))
            return h * 0.7 + c * 1.3
        return self.cell(x, h)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("bias, batch, hidden", [(True, 3, 16), (False, 130, 40)])
def test_cells_forward_and_backward_match_the_cpu_natively(kind, bias, batch, hidden):
    torch.manual_seed(0)
    module = _Cell(kind, bias, hidden)

    def inputs():
        return [torch.randn(batch, 12, requires_grad=True), torch.randn(batch, hidden, requires_grad=True),
                torch.randn(batch, hidden)]

    weights = torch.linspace(-1, 1, hidden)
    _compare(module, inputs, lambda y: (y * weights.to(y.device)).sum())
    executed = torch.neuron.get_executed_ops()
    fused = "aten::_thnn_fused_lstm_cell" if kind == "lstm" else "aten::_thnn_fused_gru_cell"
    assert fused in executed and fused + "_backward" in " ".join(executed), executed
    assert not [op for op in torch.neuron.get_fallback_ops() if "cell" in op or "mm" in op]


def test_a_two_layer_lstm_runs_its_cells_natively():
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(8, 16, num_layers=2)
    x = torch.randn(5, 3, 8)
    want, _ = lstm(x)
    got, _ = lstm.to("neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    assert "aten::_thnn_fused_lstm_cell" in torch.neuron.get_executed_ops()
