"""FSDP2 (``fully_shard``) on emulated NeuronCores: each layer's parameters sharded over the ranks,
all-gathered for forward/backward and their gradients reduce-scattered over the ``neuron`` backend;
the trained weights match one process on the full batch.

    neuronsim run --nproc 2 examples/distributed/fsdp2.py
    neuronsim profile ... : each rank's device lane shows its kernels and its collectives
"""

import torch.distributed as dist
from common import batches, mlp, reference, report, setup, train
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main() -> None:
    rank, world, device = setup()
    mesh = init_device_mesh("neuron", (world,))
    model = mlp().to(device)
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = train(model, batches(), device, shard=(rank, world))
    print(f"[rank {rank}] losses {[round(v, 4) for v in losses]}", flush=True)
    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # DTensor shards -> whole
    report("fsdp2", full, dict(reference().named_parameters()), rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
