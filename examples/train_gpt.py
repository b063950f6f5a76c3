"""Train a small GPT (token + position embeddings, causal self-attention, MLP, layernorm) with
AdamW, gradient clipping and a warmup/cosine learning-rate schedule; prints one loss per step.

A plain PyTorch script, TorchNeuron style: ``NEURON_SIM=1 python examples/train_gpt.py`` runs it
on the emulated ``neuron`` device, ``--device cpu`` on the CPU. Same seed, same losses.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    block: int = 32
    layers: int = 2
    heads: int = 4
    embd: int = 64
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.embd, 3 * cfg.embd)
        self.proj = nn.Linear(cfg.embd, cfg.embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("mask", torch.tril(torch.ones(cfg.block, cfg.block, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.embd, 4 * cfg.embd),
            nn.GELU(),
            nn.Linear(4 * cfg.embd, cfg.embd),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.embd)
        self.pos = nn.Embedding(cfg.block, cfg.embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.embd)
        self.head = nn.Linear(cfg.embd, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        positions = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_batches(
    cfg: GPTConfig, batch: int, count: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Sequences of a toy language, x[t+1] = (5 x[t] + 3) mod vocab, with 10% noise tokens."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        seq = torch.empty(batch, cfg.block + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, cfg.vocab, (batch,), generator=gen)
        for t in range(cfg.block):
            seq[:, t + 1] = (5 * seq[:, t] + 3) % cfg.vocab
        noise = torch.rand(batch, cfg.block + 1, generator=gen) < 0.1
        seq[noise] = torch.randint(0, cfg.vocab, (int(noise.sum()),), generator=gen)
        batches.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return batches


def lr_lambda(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embd", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="parameter and activation dtype")
    parser.add_argument("--compile", action="store_true", help='torch.compile(backend="neuron")')
    parser.add_argument("--quiet", action="store_true", help="do not print losses")
    return parser.parse_args(argv)


def build(args: argparse.Namespace):
    """Model, optimizer, schedule and batches, all seeded: the same on every device."""
    torch.manual_seed(args.seed)
    cfg = GPTConfig(
        block=args.block, layers=args.layers, heads=args.heads, embd=args.embd, dropout=args.dropout
    )
    model = GPT(cfg).to(device=args.device, dtype=getattr(torch, args.dtype))
    if args.compile:
        model = torch.compile(model, backend="neuron" if args.device.startswith("neuron") else "inductor")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(max(1, args.steps // 10), args.steps))
    batches = make_batches(cfg, args.batch, min(args.steps, 16), args.seed)
    return model, optimizer, schedule, batches


def train_step(model, optimizer, schedule, idx, targets) -> torch.Tensor:
    loss = model(idx, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    return loss


def main(argv: list[str] | None = None) -> list[float]:
    args = parse_args(argv)
    model, optimizer, schedule, batches = build(args)
    losses = []
    for step in range(args.steps):
        idx, targets = (t.to(args.device) for t in batches[step % len(batches)])
        losses.append(train_step(model, optimizer, schedule, idx, targets).item())
        if not args.quiet:
            print(f"step {step:4d} loss {losses[-1]:.6f} lr {schedule.get_last_lr()[0]:.2e}")
    return losses


if __name__ == "__main__":
    main()
