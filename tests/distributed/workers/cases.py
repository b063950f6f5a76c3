"""Inputs of the collectives worker, one set per rank, and their single-process expected results.

Both the worker (on each rank) and the test (on the host, with every rank's inputs) import this.
"""

from __future__ import annotations

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.int32)
TIMED_BYTES = (4096, 1 << 20)  # all_reduce / all_gather sizes the timing test checks


def tensor(rank: int, salt: int, shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=dtype)


def inputs(rank: int, n: int) -> dict[str, torch.Tensor]:
    """Per-rank inputs: odd sizes, every dtype; ``wide`` is viewed with a stride by the worker."""
    d = {}
    for i, dt in enumerate(DTYPES):
        name = str(dt).removeprefix("torch.")
        d[f"ar_{name}"] = tensor(rank, 1 + i, (5, 7), dt)
        d[f"ag_{name}"] = tensor(rank, 11 + i, (3, 5), dt)
        d[f"rs_{name}"] = tensor(rank, 21 + i, (n * 3, 2), dt)
        d[f"a2a_{name}"] = tensor(rank, 31 + i, (n * 2, 3), dt)
    d["wide"] = tensor(rank, 41, (6, 10), torch.float32)
    d["bcast"] = tensor(rank, 51, (130,), torch.float32)
    d["p2p"] = tensor(rank, 61, (9,), torch.bfloat16)
    d["special"] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1.0]) * (rank + 1)
    return d


def expected(n: int) -> list[dict[str, torch.Tensor]]:
    """What each rank should hold after the worker's collectives, computed in one process."""
    ins = [inputs(r, n) for r in range(n)]
    out = [dict() for _ in range(n)]
    for dt in DTYPES:
        name = str(dt).removeprefix("torch.")
        total = _sum([x[f"ar_{name}"] for x in ins], dt)
        gathered = torch.cat([x[f"ag_{name}"] for x in ins])
        rs_total = _sum([x[f"rs_{name}"] for x in ins], dt)
        for r in range(n):
            out[r][f"all_reduce_{name}"] = total
            out[r][f"all_gather_{name}"] = gathered
            out[r][f"all_gather_list_{name}"] = gathered
            out[r][f"reduce_scatter_{name}"] = rs_total.chunk(n)[r]
            out[r][f"reduce_scatter_list_{name}"] = rs_total.chunk(n)[r]
            out[r][f"all_to_all_{name}"] = torch.cat([ins[s][f"a2a_{name}"].chunk(n)[r] for s in range(n)])
            out[r][f"all_to_all_list_{name}"] = out[r][f"all_to_all_{name}"]
            out[r][f"functional_all_reduce_{name}"] = total
    wide_sum = sum(x["wide"][:, ::3] for x in ins)
    special_sum = sum(x["special"] for x in ins)
    for r in range(n):
        wide = ins[r]["wide"].clone()
        wide[:, ::3] = wide_sum
        out[r]["all_reduce_strided_view"] = wide
        out[r]["all_reduce_max"] = torch.stack([x["ar_float32"] for x in ins]).amax(0)
        out[r]["all_reduce_special"] = special_sum
        out[r]["async_all_reduce"] = _sum([x["ar_float32"] for x in ins], torch.float32)
        out[r]["broadcast"] = ins[n - 1]["bcast"]
        out[r]["recv"] = ins[(r - 1) % n]["p2p"]
        out[r]["functional_all_gather"] = torch.cat([x["ag_float32"] for x in ins])
        out[r]["functional_reduce_scatter"] = _sum([x["rs_float32"] for x in ins], torch.float32).chunk(n)[r]
        out[r]["subgroup_all_reduce"] = _sum(
            [ins[s]["ar_float32"] for s in range(r % 2, n, 2)], torch.float32
        )
    out[0]["reduce"] = _sum([x["bcast"] for x in ins], torch.float32)
    return out


def _sum(tensors, dtype):
    # Summed in fp32 and rounded once for bf16 inputs would differ from a ring; tests use a tolerance.
    acc = torch.zeros_like(tensors[0], dtype=torch.float64 if dtype.is_floating_point else torch.int64)
    for t in tensors:
        acc += t.to(acc.dtype)
    return acc.to(dtype)
