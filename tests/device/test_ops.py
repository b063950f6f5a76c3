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


def _same_on_device(fn, *xs):
    expected = fn(*xs)
    got = fn(*[x.to("neuron") if isinstance(x, torch.Tensor) else x for x in xs])
    assert got.device.type == "neuron" and got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True)


@pytest.mark.parametrize("case", [
    "matmul_1d_2d", "linear_1d", "rot90", "quantile", "squeeze_", "unsqueeze_", "transpose_",
])
def test_in_place_metadata_ops_change_the_device_tensor(case):
    """squeeze_/unsqueeze_/t_ (reached by matmul of 1-D inputs, rot90, quantile) go through
    ``as_strided_``, which must restride the device tensor itself, not a host alias of it."""
    torch.manual_seed(0)
    a, v, x = torch.randn(3, 4), torch.randn(4), torch.randn(5, 5, 5)
    fn, args = {
        "matmul_1d_2d": (lambda m, y: y @ m.t(), (a, v)),
        "linear_1d": (lambda y, w: torch.nn.functional.linear(y, w), (v, a)),
        "rot90": (lambda t: torch.rot90(t, 1, [0, 1]), (x,)),
        "quantile": (lambda t: torch.quantile(t, 0.5), (v,)),
        "squeeze_": (lambda t: t.clone()[None].squeeze_(0), (a,)),
        "unsqueeze_": (lambda t: t.clone().unsqueeze_(1), (a,)),
        "transpose_": (lambda t: t.clone().transpose_(0, 1) * 2, (a,)),
    }[case]
    _same_on_device(fn, *args)


@pytest.mark.parametrize("case", ["remainder_int", "copysign_float", "take_along_dim"])
def test_python_numbers_in_tensor_arguments_promote_like_wrapped_numbers(case):
    torch.manual_seed(0)
    ints, floats = torch.randint(-20, 20, (6,), dtype=torch.int32), torch.randn(6).bfloat16()
    fn, args = {
        "remainder_int": (lambda t: torch.remainder(t, 5), (ints,)),
        "copysign_float": (lambda t: torch.copysign(t, -3.14), (floats,)),
        "take_along_dim": (lambda t, i: torch.take_along_dim(t, i, 1),
                           (torch.randn(3, 4), torch.randint(0, 4, (3, 2)))),
    }[case]
    _same_on_device(fn, *args)


def test_host_kernels_that_insist_on_int64_indices_get_them():
    t = torch.randn(4, 3)
    _same_on_device(lambda x, i: x.index_fill(0, i, 1.5), t, torch.tensor([0, 2]))


def test_non_blocking_copies_to_the_host():
    """A non-blocking device->host copy stages through pinned memory on a GPU; here it is blocking."""
    x = torch.randn(3, 4)
    d = x.to("neuron", non_blocking=True)
    assert torch.equal(d.to("cpu", non_blocking=True), x)
    assert d.to("cpu", torch.float64, non_blocking=True).dtype == torch.float64
    leaf = d.clone().requires_grad_()
    leaf.to("cpu", non_blocking=True).sum().backward()
    assert torch.equal(leaf.grad.cpu(), torch.ones(3, 4))
