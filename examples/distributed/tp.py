"""Tensor parallelism (DTensor ``parallelize_module``) on emulated NeuronCores: the first Linear of
each pair split by columns, the second by rows (Megatron style), over ``init_device_mesh("neuron")``;
every rank sees the whole batch and the trained weights match one process.

    neuronsim run --nproc 2 examples/distributed/tp.py
"""

import torch.distributed as dist
from common import batches, mlp, reference, report, setup, train
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def main() -> None:
    rank, world, device = setup()
    mesh = init_device_mesh("neuron", (world,))
    model = mlp().to(device)
    # layer 0 column-wise (its output sharded), layer 2 row-wise on that shard (an all-reduce makes its
    # output whole), layer 4 column-wise with its output gathered for the loss
    parallelize_module(
        model,
        mesh,
        {"0": ColwiseParallel(), "2": RowwiseParallel(), "4": ColwiseParallel(output_layouts=Replicate())},
    )
    losses = train(model, batches(), device)  # every rank trains on the full batch
    print(f"[rank {rank}] losses {[round(v, 4) for v in losses]}", flush=True)
    full = {name: p.full_tensor() for name, p in model.named_parameters()}
    report("tp", full, dict(reference().named_parameters()), rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
