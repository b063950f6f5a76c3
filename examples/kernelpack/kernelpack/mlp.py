"""A transformer MLP block as a torch module: x + W2 gelu(W1 rmsnorm(x))."""

from __future__ import annotations

import torch
from torch import nn


class MLPBlock(nn.Module):
    def __init__(self, dim: int = 256, hidden: int = 1024):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
