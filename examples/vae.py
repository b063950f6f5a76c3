"""Train a variational autoencoder the way PyTorch's VAE example does (784-400-20 encoder, the
reparameterization trick with ``randn_like``, sigmoid decoder, binary cross-entropy + KL divergence,
Adam) on synthetic 28x28 images; prints one loss per step and samples from the prior at the end.

A plain PyTorch script, TorchNeuron style: ``NEURON_SIM=1 python examples/vae.py`` runs it on
the emulated ``neuron`` device, ``--device cpu`` on the CPU. The noise comes from the device's own
generator (``torch.manual_seed`` repeats it), so the two devices train on different noise, as two
GPUs would. ``--cpu-rng`` draws it from a seeded CPU generator and moves it to the device (the
idiom for reproducing a run across devices): then the CPU and ``neuron`` runs compute the same losses
(``tests/examples/test_vision_examples.py``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self, pixels: int = 784, hidden: int = 400, latent: int = 20):
        super().__init__()
        self.pixels = pixels
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps=None):
        std = torch.exp(0.5 * logvar)
        if eps is None:
            eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps=None):
        mu, logvar = self.encode(x.view(-1, self.pixels))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence losses summed over all elements and the batch."""
    bce = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.shape[1]), reduction="sum")
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)  (Kingma and Welling, appendix B)
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def make_images(n: int, side: int, seed: int) -> torch.Tensor:
    """Blurry blobs in [0, 1], ``[n, 1, side, side]`` (what a data loader of MNIST hands over)."""
    gen = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    centers = torch.rand(n, 2, generator=gen) * side
    d2 = (ys - centers[:, 0, None, None]) ** 2 + (xs - centers[:, 1, None, None]) ** 2
    return torch.exp(-d2 / (2 * (side / 6) ** 2)).unsqueeze(1)


def train_step(model, optimizer, data, eps=None) -> torch.Tensor:
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data, eps)
    loss = loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    return loss


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-rng", action="store_true", help="draw the noise on the CPU (comparable runs)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--side", type=int, default=28, help="image side (pixels = side * side)")
    parser.add_argument("--hidden", type=int, default=400)
    parser.add_argument("--latent", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    images = make_images(args.batch * 4, args.side, args.seed)
    model = VAE(args.side * args.side, args.hidden, args.latent).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    noise = torch.Generator().manual_seed(args.seed) if args.cpu_rng else None
    for step in range(args.steps):
        start = (step % 4) * args.batch
        data = images[start:start + args.batch].to(device)
        eps = None if noise is None else torch.randn(len(data), args.latent, generator=noise).to(device)
        losses.append(train_step(model, optimizer, data, eps).item() / len(data))
        if not args.quiet:
            print(f"step {step:4d} loss {losses[-1]:.4f}")
    model.eval()
    with torch.no_grad():
        sample = torch.randn(64, args.latent).to(device)
        sample = model.decode(sample).cpu()
    if not args.quiet:
        print(f"samples {tuple(sample.shape)} mean {sample.mean():.4f}")
    return losses


if __name__ == "__main__":
    main()
