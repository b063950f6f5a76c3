"""Worker: every collective of the ``neuron`` backend on neuron tensors; saves results and clock events.

Run one process per rank (tests/distributed/launch.py); argv[1] is the output directory.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

sys.path.insert(0, os.path.dirname(__file__))
from cases import DTYPES, TIMED_BYTES, inputs  # noqa: E402


def main(outdir: str) -> None:
    dist.init_process_group("neuron")
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "neuron"
    x = {k: v.to("neuron") for k, v in inputs(r, n).items()}
    res = {}
    for dt in DTYPES:
        name = str(dt).removeprefix("torch.")
        t = x[f"ar_{name}"].clone()
        dist.all_reduce(t)
        res[f"all_reduce_{name}"] = t
        src = x[f"ag_{name}"]
        out = torch.empty((n * src.shape[0], src.shape[1]), dtype=dt, device="neuron")
        dist.all_gather_into_tensor(out, src)
        res[f"all_gather_{name}"] = out
        outs = [torch.empty_like(src) for _ in range(n)]
        dist.all_gather(outs, src)
        res[f"all_gather_list_{name}"] = torch.cat(outs)
        rs_in = x[f"rs_{name}"]
        rs_out = torch.empty((3, 2), dtype=dt, device="neuron")
        dist.reduce_scatter_tensor(rs_out, rs_in)
        res[f"reduce_scatter_{name}"] = rs_out
        rs_out = torch.empty((3, 2), dtype=dt, device="neuron")
        dist.reduce_scatter(rs_out, list(rs_in.chunk(n)))
        res[f"reduce_scatter_list_{name}"] = rs_out
        a2a = x[f"a2a_{name}"]
        a2a_out = torch.empty_like(a2a)
        dist.all_to_all_single(a2a_out, a2a)
        res[f"all_to_all_{name}"] = a2a_out
        outs = [torch.empty((2, 3), dtype=dt, device="neuron") for _ in range(n)]
        dist.all_to_all(outs, list(a2a.chunk(n)))
        res[f"all_to_all_list_{name}"] = torch.cat(outs)
        res[f"functional_all_reduce_{name}"] = fc.all_reduce(x[f"ar_{name}"], "sum", dist.group.WORLD)

    wide = x["wide"].clone()
    dist.all_reduce(wide[:, ::3])  # not contiguous: staged through a copy and written back
    res["all_reduce_strided_view"] = wide
    t = x["ar_float32"].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    res["all_reduce_max"] = t
    t = x["special"].clone()
    dist.all_reduce(t)
    res["all_reduce_special"] = t
    t = x["ar_float32"].clone()
    work = dist.all_reduce(t, async_op=True)
    assert work.wait() is True and work.is_completed()
    res["async_all_reduce"] = t
    b = x["bcast"].clone()
    dist.broadcast(b, src=n - 1)
    res["broadcast"] = b
    b = x["bcast"].clone()
    dist.reduce(b, dst=0)
    if r == 0:
        res["reduce"] = b
    dist.barrier()
    recv = torch.empty_like(x["p2p"])
    works = [dist.isend(x["p2p"], (r + 1) % n), dist.irecv(recv, (r - 1) % n)]
    for w in works:
        w.wait()
    res["recv"] = recv
    res["functional_all_gather"] = fc.all_gather_tensor(x["ag_float32"], 0, dist.group.WORLD)
    res["functional_reduce_scatter"] = fc.reduce_scatter_tensor(x["rs_float32"], "sum", 0, dist.group.WORLD)
    groups = [dist.new_group(list(range(p, n, 2))) for p in (0, 1)]
    t = x["ar_float32"].clone()
    dist.all_reduce(t, group=groups[r % 2])
    res["subgroup_all_reduce"] = t

    # Timing: collectives of known sizes on uninitialised buffers (values do not matter here).
    timed_start = len(clock_events())
    for nbytes in TIMED_BYTES:
        buf = torch.empty(nbytes // 4, device="neuron")
        dist.all_reduce(buf)
        dist.all_gather_into_tensor(torch.empty(n * nbytes // 4, device="neuron"), buf)
        dist.reduce_scatter_tensor(torch.empty(nbytes // 4 // n, device="neuron"), buf)
        dist.broadcast(buf, src=0)
        dist.all_to_all_single(torch.empty_like(buf), buf)
    dist.barrier()
    dist.all_reduce(torch.empty(1024, device="neuron"), group=groups[r % 2])
    events = clock_events()
    torch.save(
        {
            "results": {k: v.cpu() for k, v in res.items()},
            "events": events,
            "timed_start": timed_start,
            "now_ns": current_clock().now_ns,
            "device": torch.neuron.current_device(),
        },
        os.path.join(outdir, f"rank{r}.pt"),
    )
    dist.destroy_process_group()


def current_clock():
    from neuronsim.device import clock

    return clock.clock(torch.neuron.current_device())


def clock_events():
    return [
        (e.name, e.start_ns, e.duration_ns, e.bytes)
        for e in current_clock().events()
        if e.kind == "collective"
    ]


if __name__ == "__main__":
    main(sys.argv[1])
