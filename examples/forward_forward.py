"""Hinton's forward-forward algorithm, written the way the popular PyTorch implementation is: each
``Layer`` is an ``nn.Linear`` that builds its own Adam optimizer in ``__init__`` — before the network
is moved with ``.to(device)``, so the optimizers hold the parameters the move must keep — and trains
greedily on positive data (the right label overlaid on the image) against negative data (a wrong
label), the goodness being the mean squared activation.

The images are made here (no dataset download): ``NEURON_SIM=1 python examples/forward_forward.py``
trains on the emulated ``neuron`` device, ``--device cpu`` on the CPU.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.optim import Adam


def overlay_y_on_x(x: torch.Tensor, y) -> torch.Tensor:
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]."""
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, epochs=20):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0
        self.num_epochs = epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg, losses):  # (shadows nn.Module.train, as the original does)
        for _ in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            # The following loss pushes pos (neg) samples to values larger (smaller) than the threshold.
            margins = torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
            loss = torch.log(1 + torch.exp(margins)).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims, epochs):
        super().__init__()
        self.layers = [Layer(dims[d], dims[d + 1], epochs=epochs) for d in range(len(dims) - 1)]
        for i, layer in enumerate(self.layers):
            self.add_module(f"layer{i}", layer)

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        return torch.cat(goodness_per_label, 1).argmax(1)

    def train(self, x_pos, x_neg, losses):
        h_pos, h_neg = x_pos, x_neg
        for layer in self.layers:
            h_pos, h_neg = layer.train(h_pos, h_neg, losses)


def make_data(n: int, pixels: int, seed: int):
    """Ten classes of noisy 'images': each class a fixed random pattern plus noise."""
    gen = torch.Generator().manual_seed(seed)
    patterns = torch.rand(10, pixels, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    x = patterns[y] + 0.3 * torch.rand(n, pixels, generator=gen)
    return x, y


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--epochs", type=int, default=10, help="epochs per layer")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--pixels", type=int, default=196)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[float]:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    # the optimizers are already built
    net = Net([args.pixels, args.hidden, args.hidden], args.epochs).to(args.device)
    x, y = make_data(args.samples, args.pixels, args.seed)
    x, y = x.to(args.device), y.to(args.device)
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0), generator=torch.Generator().manual_seed(args.seed))
    x_neg = overlay_y_on_x(x, y[rnd.to(args.device)])
    losses: list[float] = []
    net.train(x_pos, x_neg, losses)
    accuracy = net.predict(x).eq(y).float().mean().item()
    if not args.quiet:
        print(f"final loss {losses[-1]:.5f}  train accuracy {accuracy:.3f}")
    return losses + [accuracy]


if __name__ == "__main__":
    main()
