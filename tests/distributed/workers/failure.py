"""Worker: rank 1 misbehaves (argv[1] = die | hang | late, or ddp_die | ddp_hang | barrier_die), the
others run an all_reduce (a DDP training step, a barrier) and report what they got as one JSON line:
the error's type and message and how long it took."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def _ddp_step(model) -> None:
    x = torch.ones(4, 8, device=f"neuron:{os.environ['LOCAL_RANK']}")
    model(x).square().mean().backward()  # the reducer all-reduces the gradients


def main(mode: str) -> None:
    rank = int(os.environ["RANK"])
    if rank == 1 and mode == "late":
        time.sleep(12)  # never joins in time
        return
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("neuron")
    t = torch.ones(8, device="neuron")
    dist.all_reduce(t)  # everyone is alive here
    if mode.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(torch.nn.Linear(8, 4).to("neuron"), broadcast_buffers=False)
        if mode.startswith("ddp_hook"):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.allreduce_hook)
    if mode.startswith("fsdp"):
        from torch.distributed.fsdp import fully_shard

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)).to("neuron")
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    if mode.startswith(("ddp", "fsdp")):
        for _ in range(2):  # everyone trains (the second step rebuilds the gradient buckets)
            _ddp_step(model)
    if rank == 1:
        if mode.endswith("die"):
            os._exit(3)
        time.sleep(60)  # hangs (the test kills it)
        return
    start = time.monotonic()
    try:
        if mode.startswith(("ddp", "fsdp")):
            _ddp_step(model)
        elif mode.startswith("barrier"):
            dist.barrier()
        else:
            dist.all_reduce(t)
        outcome = {"error": None}
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        outcome = {"error": type(exc).__module__ + "." + type(exc).__name__, "message": str(exc)}
    outcome["seconds"] = time.monotonic() - start
    print(json.dumps(outcome), flush=True)
    os._exit(0)  # skip destroy_process_group: the peer is gone


def main_late() -> None:
    start = time.monotonic()
    try:
        dist.init_process_group("neuron")
        outcome = {"error": None}
    except Exception as exc:  # noqa: BLE001
        outcome = {"error": type(exc).__module__ + "." + type(exc).__name__, "message": str(exc)}
    outcome["seconds"] = time.monotonic() - start
    print(json.dumps(outcome), flush=True)
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "late" and os.environ["RANK"] == "0":
        main_late()
    else:
        main(sys.argv[1])
