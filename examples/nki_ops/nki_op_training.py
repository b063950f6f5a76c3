"""Train a model whose activation is an NKI kernel, registered with ``torch_neuronx.nki_op``.

A TorchNeuron script as its docs write one (torch/guides/how-to-work-with-nki): ``@nki.jit``
kernels for SiLU's forward and backward, ``@nki_op`` custom ops calling them through
``wrap_nki``, ``register_autograd`` tying them together; then a few SGD steps on ``neuron``,
eagerly and under ``torch.compile(backend="neuron", fullgraph=True)``, each checked against the
same model trained on the CPU with ``torch.nn.functional.silu``.

    NEURON_SIM=1 python examples/nki_ops/nki_op_training.py

(``import torch`` comes first: under ``NEURON_SIM=1`` it is what makes ``nki`` and
``torch_neuronx`` resolve to neuronsim; ``neuronsim run`` does that before the script starts.)
"""

from __future__ import annotations

import torch  # first: see above

# isort: split
import nki
import nki.language as nl
import torch.nn.functional as F
import torch_neuronx
from torch_neuronx import nki_op, wrap_nki

ROWS = 128  # rows per tile: the partition dimension


@nki.jit
def silu_kernel(x):
    """x * sigmoid(x) for an [N, F] tensor, N a multiple of 128."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // ROWS):
        rows = slice(i * ROWS, (i + 1) * ROWS)
        t = nl.load(x[rows, :])
        nl.store(out[rows, :], nl.multiply(t, nl.sigmoid(t)))
    return out


@nki.jit
def silu_backward_kernel(x, grad):
    """grad * d silu(x)/dx = grad * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // ROWS):
        rows = slice(i * ROWS, (i + 1) * ROWS)
        t = nl.load(x[rows, :])
        g = nl.load(grad[rows, :])
        s = nl.sigmoid(t)
        slope = nl.add(nl.multiply(t, nl.subtract(1.0, s)), 1.0)
        nl.store(out[rows, :], nl.multiply(g, nl.multiply(s, slope)))
    return out


@nki_op("demo::silu", mutates_args={})
def silu(x: torch.Tensor) -> torch.Tensor:
    return wrap_nki(silu_kernel)(x)


@nki_op("demo::silu_backward", mutates_args={})
def silu_backward(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return wrap_nki(silu_backward_kernel)(x, grad)


def _setup(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return silu_backward(x, grad.contiguous())


silu.register_autograd(_backward, setup_context=_setup)


class MLP(torch.nn.Module):
    def __init__(self, activation):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 8)
        self.activation = activation

    def forward(self, x):
        return self.fc2(self.activation(self.fc1(x)))


def train(device: str, activation, compiled: bool, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    model = MLP(activation).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(ROWS, 32)
    target = torch.randn(ROWS, 8)
    step_fn = torch.compile(model, backend="neuron", fullgraph=True) if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(step_fn(data.to(device)), target.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    reference = train("cpu", F.silu, compiled=False)
    torch_neuronx.clear_op_tracking()
    for compiled in (False, True):
        losses = train("neuron", silu, compiled)
        mode = "compiled" if compiled else "eager"
        print(f"{mode:9s} losses on neuron: {' '.join(f'{x:.5f}' for x in losses)}")
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=2e-3, atol=1e-5)
    print(f"reference losses on cpu: {' '.join(f'{x:.5f}' for x in reference)}")
    kernels = sorted(op for op in torch_neuronx.get_executed_ops() if op.startswith("nki:"))
    print("NKI kernels run on the device:", ", ".join(kernels))


if __name__ == "__main__":
    main()
