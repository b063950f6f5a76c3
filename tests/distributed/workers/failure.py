"""Worker: rank 1 misbehaves (argv[1] = die | hang | late), the others run an all_reduce and report
what they got as one JSON line: the error's type and message and how long it took."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main(mode: str) -> None:
    rank = int(os.environ["RANK"])
    if rank == 1 and mode == "late":
        time.sleep(12)  # never joins in time
        return
    dist.init_process_group("neuron")
    t = torch.ones(8, device="neuron")
    dist.all_reduce(t)  # everyone is alive here
    if rank == 1:
        if mode == "die":
            os._exit(3)
        time.sleep(60)  # hangs (the test kills it)
        return
    start = time.monotonic()
    try:
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
