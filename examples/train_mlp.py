"""Train a small MLP classifier on synthetic data; prints one loss per step.

A plain PyTorch script, TorchNeuron style: ``NEURON_SIM=1 python examples/train_mlp.py`` runs it on
the emulated ``neuron`` device, ``--device cpu`` on the CPU. Same seed, same losses.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def make_data(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=gen) * 2
    labels = torch.randint(0, classes, (n,), generator=gen)
    points = centers[labels] + torch.randn(n, features, generator=gen)
    return points, labels


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    features, classes = 16, 4
    points, labels = make_data(args.batch * 8, features, classes, args.seed)
    model = nn.Sequential(
        nn.Linear(features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, classes),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(args.steps):
        start = (step * args.batch) % len(points)
        x = points[start : start + args.batch].to(device)
        y = labels[start : start + args.batch].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        print(f"step {step:4d} loss {losses[-1]:.6f}")
    return losses


if __name__ == "__main__":
    main()
