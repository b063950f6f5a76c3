"""Train a CNN classifier with dropout, the way PyTorch's MNIST example does (two 3x3 convolutions,
max pooling, dropout, two linear layers, log-softmax + NLL, Adadelta with a StepLR schedule) on
synthetic 28x28 digits; prints one loss per step.

A plain PyTorch script, TorchNeuron style: ``NEURON_SIM=1 python examples/cnn_classifier.py`` runs it on
the emulated ``neuron`` device, ``--device cpu`` on the CPU. Dropout masks come from the device's
own generator (``torch.manual_seed`` repeats them), so with ``--dropout 0`` the two devices give the
same losses; with dropout they differ as two GPUs' would.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self, width: int = 32, dropout: float = 0.25, image: int = 28):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, 1)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(2 * dropout)
        side = (image - 4) // 2
        self.fc1 = nn.Linear(2 * width * side * side, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def make_digits(n: int, image: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy images of ten fixed random strokes patterns, normalized as MNIST's transform does."""
    gen = torch.Generator().manual_seed(seed)
    patterns = (torch.rand(10, 1, image, image, generator=gen) > 0.8).float()
    labels = torch.randint(0, 10, (n,), generator=gen)
    images = (patterns[labels] + 0.3 * torch.rand(n, 1, image, image, generator=gen)).clamp(0, 1)
    return (images - 0.1307) / 0.3081, labels


def train_step(model, optimizer, data, target) -> torch.Tensor:
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    return loss


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=32, help="channels of the first convolution")
    parser.add_argument("--image", type=int, default=28)
    parser.add_argument("--dropout", type=float, default=0.25)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    images, labels = make_digits(args.batch * args.steps_per_epoch, args.image, args.seed)
    model = Net(args.width, args.dropout, args.image).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    model.train()
    losses = []
    for step in range(args.steps):
        start = (step % args.steps_per_epoch) * args.batch
        data = images[start:start + args.batch].to(device)
        target = labels[start:start + args.batch].to(device)
        losses.append(train_step(model, optimizer, data, target).item())
        if not args.quiet:
            print(f"step {step:4d} loss {losses[-1]:.6f}")
        if (step + 1) % args.steps_per_epoch == 0:
            scheduler.step()
    return losses


if __name__ == "__main__":
    main()
