"""Eager op semantics on neuron tensors: results equal the CPU's, aliasing is preserved."""

from __future__ import annotations

import threading

import pytest
import torch

OPS = {
    "matmul": lambda a, b: a @ b.t(),
    "softmax": lambda a, b: torch.softmax(a, -1),
    "layer_norm": lambda a, b: torch.nn.functional.layer_norm(a, (5,)),
    "sort": lambda a, b: torch.sort(a, dim=1),
    "topk": lambda a, b: torch.topk(a, 2),
    "cat_stack": lambda a, b: (torch.cat([a, b]), torch.stack([a, b])),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "bool_index": lambda a, b: a[a > 0],
    "nonzero": lambda a, b: torch.nonzero(a > 0),
    "cumsum_bf16": lambda a, b: a.bfloat16().cumsum(0),
    "conv2d": lambda a, b: torch.nn.functional.conv2d(a.view(1, 1, 4, 5), b.view(1, 1, 4, 5)[:, :, :3, :3]),
    "embedding": lambda a, b: torch.nn.functional.embedding(torch.tensor([0, 3, 1], device=a.device), a),
    "sdpa": lambda a, b: torch.nn.functional.scaled_dot_product_attention(a[None], b[None], b[None]),
    "max_dim": lambda a, b: a.max(dim=1),
    "argmax": lambda a, b: a.argmax(),
    "std_mean": lambda a, b: torch.std_mean(a, dim=0),
}


def _inputs(device):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(4, 5, generator=gen).to(device), torch.randn(4, 5, generator=gen).to(device)


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_cpu(name):
    neuron = OPS[name](*_inputs("neuron"))
    cpu = OPS[name](*_inputs("cpu"))
    flat_n = neuron if isinstance(neuron, tuple) else (neuron,)
    flat_c = cpu if isinstance(cpu, tuple) else (cpu,)
    for n, c in zip(flat_n, flat_c, strict=True):
        assert n.device.type == "neuron"
        torch.testing.assert_close(n.cpu(), c, rtol=1e-6, atol=1e-6)


def test_out_arguments_resize_and_write_in_place():
    out = torch.empty(0, device="neuron")
    result = torch.add(torch.ones(3, device="neuron"), 1, out=out)
    assert result is out and out.cpu().tolist() == [2, 2, 2]
    values, indices = torch.empty(0, device="neuron"), torch.empty(0, dtype=torch.long, device="neuron")
    torch.max(torch.tensor([[1.0, 3.0], [4.0, 2.0]], device="neuron"), 1, out=(values, indices))
    assert values.cpu().tolist() == [3, 4] and indices.cpu().tolist() == [1, 0]


def test_resize_grows_and_keeps_the_old_values():
    t = torch.arange(3.0, device="neuron")
    t.resize_(6)
    assert t.shape == (6,) and t[:3].cpu().tolist() == [0, 1, 2]


def test_zero_element_tensors_and_cpu_scalars():
    empty = torch.empty(0, 3, device="neuron")
    assert (empty + 1).shape == (0, 3)
    assert torch.cat([empty, torch.ones(1, 3, device="neuron")]).shape == (1, 3)
    assert (torch.ones(2, device="neuron") * torch.tensor(3.0)).cpu().tolist() == [3, 3]


def test_device_mismatch_and_numpy_fail_like_cuda():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="neuron") + torch.ones(2)
    with pytest.raises(TypeError, match="numpy"):
        torch.ones(2, device="neuron").numpy()


def test_ops_from_several_threads():
    errors = []

    def work():
        try:
            for _ in range(50):
                x = torch.randn(8, 8, device="neuron")
                (x @ x).sum().item()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
