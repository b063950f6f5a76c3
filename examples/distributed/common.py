"""What the distributed examples share: a small MLP, its data, a training loop and the check that
the distributed run matches the same training in one process (on the host, full batch)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

STEPS, GLOBAL_BATCH, LR = 3, 8, 0.1


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
        for _ in range(STEPS)
    ]


def train(model: nn.Module, data, device: str, shard: tuple[int, int] = (0, 1)) -> list[float]:
    """SGD on mean-squared error; ``shard`` = (rank, world): each rank trains on its slice of the batch."""
    rank, world = shard
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in data:
        x, y = x.chunk(world)[rank].to(device), y.chunk(world)[rank].to(device)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def setup() -> tuple[int, int, str]:
    """Select this rank's NeuronCore and join the ``neuron`` process group, as TorchNeuron scripts
    do under torchrun (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local_rank)
    dist.init_process_group("neuron")
    return dist.get_rank(), dist.get_world_size(), f"neuron:{local_rank}"


def reference() -> nn.Sequential:
    """The same training in one process on the host, on the full batch."""
    model = mlp()
    train(model, batches(), "cpu")
    return model


def report(
    name: str, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], rank: int, atol: float = 1e-4
) -> None:
    """Print the largest difference from the single-process result; raise if it is too large."""
    diff = max((got[k].detach().cpu().float() - want[k].detach().float()).abs().max().item() for k in want)
    print(f"[rank {rank}] {name}: max |param - single-process param| = {diff:.2e}", flush=True)
    if not diff <= atol:
        raise SystemExit(
            f"[rank {rank}] {name} does not match the single-process result ({diff:.2e} > {atol})"
        )
