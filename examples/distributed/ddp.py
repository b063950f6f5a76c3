"""DistributedDataParallel on emulated NeuronCores: one process per logical core, gradients
all-reduced over the ``neuron`` backend; the trained weights match one process on the full batch.

    neuronsim run --nproc 2 examples/distributed/ddp.py
    NEURON_SIM=1 torchrun --nproc_per_node 2 examples/distributed/ddp.py
"""

import torch.distributed as dist
from common import batches, mlp, reference, report, setup, train
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    rank, world, device = setup()
    model = mlp().to(device)
    losses = train(DDP(model), batches(), device, shard=(rank, world))
    print(f"[rank {rank}] losses {[round(v, 4) for v in losses]}", flush=True)
    report("ddp", dict(model.named_parameters()), dict(reference().named_parameters()), rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
