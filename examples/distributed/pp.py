"""Pipeline parallelism (``torch.distributed.pipelining``) on emulated NeuronCores: the MLP cut into
one stage per rank, activations and gradients sent between stages over the ``neuron`` backend, a
GPipe schedule over 4 micro-batches; each stage's trained weights match one process.

    neuronsim run --nproc 2 examples/distributed/pp.py
"""

import torch
import torch.distributed as dist
from common import GLOBAL_BATCH, LR, batches, mlp, reference, report, setup
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

MICROBATCHES = 4
CUTS = {2: [0, 2, 5], 3: [0, 2, 4, 5]}  # stage boundaries over the MLP's 5 modules, by stage count


def main() -> None:
    rank, world, device = setup()
    if world not in CUTS:
        raise SystemExit(f"pp.py runs on {sorted(CUTS)} ranks, not {world}")
    first, last = CUTS[world][rank], CUTS[world][rank + 1]
    stage_module = mlp()[first:last].to(device)  # keeps the full model's parameter names
    stage = PipelineStage(stage_module, rank, world, torch.device(device))
    schedule = ScheduleGPipe(stage, MICROBATCHES, loss_fn=nn.functional.mse_loss)  # grads / micro-batches
    opt = torch.optim.SGD(stage_module.parameters(), lr=LR)
    for x, y in batches():
        losses = []
        if rank == 0:
            schedule.step(x.to(device))
        elif rank == world - 1:
            schedule.step(target=y.to(device), losses=losses)
        else:
            schedule.step()
        opt.step()
        opt.zero_grad()
        if losses:
            print(
                f"[rank {rank}] loss {torch.stack(losses).mean().item():.4f} "
                f"({MICROBATCHES} micro-batches of {GLOBAL_BATCH // MICROBATCHES})",
                flush=True,
            )
    want = {k: v for k, v in reference().named_parameters() if int(k.split(".")[0]) in range(first, last)}
    report(f"pp stage {rank}", dict(stage_module.named_parameters()), want, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
