"""Train a DCGAN the way PyTorch's DCGAN example does (transposed-convolution generator and
convolutional discriminator with batch norm, LeakyReLU, the DCGAN weight init, BCELoss, Adam with
beta1 = 0.5) on synthetic 64x64 images; prints both losses per step.

A plain PyTorch script, TorchNeuron style: ``NEURON_SIM=1 python examples/dcgan.py`` runs it
on the emulated ``neuron`` device, ``--device cpu`` on the CPU. The weight init and the noise come
from the device's own generator (``torch.manual_seed`` repeats them), so the two devices start from
different weights, as two GPUs would. ``--cpu-rng`` initialises the models on the CPU before moving
them and draws the noise from a seeded CPU generator (the idiom for reproducing a run across
devices): then the CPU and ``neuron`` runs compute the same losses
(``tests/examples/test_vision_examples.py``).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def weights_init(m):
    """The DCGAN paper's init: N(0, 0.02) convolutions, N(1, 0.02) batch-norm scales, zero shifts."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, nz: int = 100, ngf: int = 64, nc: int = 3):
        super().__init__()
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 64, nc: int = 3):
        super().__init__()
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


REAL_LABEL, FAKE_LABEL = 1.0, 0.0


def train_step(netD, netG, optimizerD, optimizerG, criterion, real, noise):
    """One iteration of the example's loop: (1) maximize log(D(x)) + log(1 - D(G(z))), (2) maximize
    log(D(G(z))). Returns the losses and D's mean outputs as tensors (the caller takes ``.item()``)."""
    # (1) Update D network
    netD.zero_grad()
    batch_size = real.size(0)
    label = torch.full((batch_size,), REAL_LABEL, dtype=real.dtype, device=real.device)
    output = netD(real)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean()
    fake = netG(noise)
    label.fill_(FAKE_LABEL)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean()
    errD = errD_real + errD_fake
    optimizerD.step()
    # (2) Update G network
    netG.zero_grad()
    label.fill_(REAL_LABEL)  # fake labels are real for generator cost
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean()
    optimizerG.step()
    return errD, errG, D_x, D_G_z1, D_G_z2


def make_images(n: int, nc: int, seed: int) -> torch.Tensor:
    """Smooth colour gradients in [-1, 1], ``[n, nc, 64, 64]`` (as the example's Normalize leaves them)."""
    gen = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(-1, 1, 64)
    slopes = torch.rand(n, nc, 2, generator=gen) * 2 - 1
    img = slopes[:, :, 0, None, None] * ramp[None, None, :, None] + slopes[:, :, 1, None, None] * ramp
    return img.clamp(-1, 1)


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-rng", action="store_true",
                        help="initialise the models and draw the noise on the CPU (comparable runs)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--nz", type=int, default=100, help="size of the latent z vector")
    parser.add_argument("--ngf", type=int, default=64)
    parser.add_argument("--ndf", type=int, default=64)
    parser.add_argument("--nc", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=999)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    images = make_images(args.batch * 4, args.nc, args.seed)
    rng = torch.Generator().manual_seed(args.seed) if args.cpu_rng else None
    if rng is None:  # the example's order: move, then initialise on the device
        netG = Generator(args.nz, args.ngf, args.nc).to(device)
        netG.apply(weights_init)
        netD = Discriminator(args.ndf, args.nc).to(device)
        netD.apply(weights_init)
    else:
        netG = Generator(args.nz, args.ngf, args.nc).apply(weights_init).to(device)
        netD = Discriminator(args.ndf, args.nc).apply(weights_init).to(device)

    def draw_noise(n):
        if rng is None:
            return torch.randn(n, args.nz, 1, 1, device=device)
        return torch.randn(n, args.nz, 1, 1, generator=rng).to(device)

    criterion = nn.BCELoss()
    fixed_noise = draw_noise(args.batch)
    optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    losses = []
    for step in range(args.steps):
        start = (step % 4) * args.batch
        real = images[start:start + args.batch].to(device)
        noise = draw_noise(real.size(0))
        errD, errG, D_x, D_G_z1, D_G_z2 = train_step(netD, netG, optimizerD, optimizerG, criterion, real,
                                                     noise)
        losses.append((errD.item(), errG.item()))
        if not args.quiet:
            print(f"step {step:4d} Loss_D: {losses[-1][0]:.4f} Loss_G: {losses[-1][1]:.4f} "
                  f"D(x): {D_x.item():.4f} D(G(z)): {D_G_z1.item():.4f} / {D_G_z2.item():.4f}")
    with torch.no_grad():
        fake = netG(fixed_noise).detach().cpu()
    if not args.quiet:
        print(f"fixed-noise samples {tuple(fake.shape)} in [{fake.min():.3f}, {fake.max():.3f}]")
    return losses


if __name__ == "__main__":
    main()
