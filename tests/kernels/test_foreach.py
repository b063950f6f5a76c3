"""Multi-tensor ops (``_foreach_*``) against ATen-CPU, runtime scalars, aliasing, optimizers."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, ran_natively, tolerance

import neuronsim.kernels.foreach  # noqa: F401  (registers the real kernels)
from neuronsim.device import native

SHAPES = [(3, 5), (130, 7), (1000,), (2, 3, 4)]


def tensors(dtype, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
    return [t.abs() + 0.5 for t in ts] if positive else ts


def on_device(ts):
    return [t.to("neuron") for t in ts]


def assert_lists_match(device_list, cpu_list, dtype):
    assert len(device_list) == len(cpu_list)
    for d, c in zip(device_list, cpu_list, strict=True):
        assert d.device.type == "neuron"
        torch.testing.assert_close(d.cpu(), c, **tolerance(dtype))


IN_PLACE = {
    "aten::_foreach_mul_.Scalar": (1, lambda a: torch._foreach_mul_(a, 0.37)),
    "aten::_foreach_add_.Scalar": (1, lambda a: torch._foreach_add_(a, 1e-8)),
    "aten::_foreach_div_.ScalarList": (1, lambda a: torch._foreach_div_(a, [1.5, 2.5, 0.3, 7.0])),
    "aten::_foreach_sub_.List": (2, lambda a, b: torch._foreach_sub_(a, b, alpha=0.5)),
    "aten::_foreach_addcmul_.Scalar": (3, lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=1e-3)),
    "aten::_foreach_addcdiv_.ScalarList": (
        3, lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [-1e-3, 2.0, 0.5, 1.0])),
    "aten::_foreach_lerp_.Scalar": (2, lambda a, b: torch._foreach_lerp_(a, b, 0.1)),
    "aten::_foreach_zero_": (1, lambda a: torch._foreach_zero_(a)),
    "aten::_foreach_sign_": (1, lambda a: torch._foreach_sign_(a)),  # the element-wise family's chains
    "aten::_foreach_round_": (1, lambda a: torch._foreach_round_(torch._foreach_mul_(a, 3.0) or a)),
    "aten::_foreach_log2_": (2, lambda a, b: torch._foreach_log2_(torch._foreach_abs_(a) or a)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(IN_PLACE))
def test_in_place_ops_match_cpu(name, dtype):
    lists, fn = IN_PLACE[name]
    cpu = [tensors(dtype, positive=k == 2, seed=k) for k in range(lists)]
    dev = [on_device(ts) for ts in cpu]
    pointers = [t.data_ptr() for t in dev[0]]
    fn(*dev)
    fn(*cpu)
    assert [t.data_ptr() for t in dev[0]] == pointers  # written in place
    assert ran_natively(name)
    assert_lists_match(dev[0], cpu[0], dtype)
    for d, c in zip(dev[1:], cpu[1:], strict=True):  # read-only lists are untouched
        assert_lists_match(d, c, dtype)


def test_lerp_weights_on_both_sides_of_one_half():
    a, b = tensors(torch.float32, seed=1), tensors(torch.float32, seed=2)
    da, db = on_device(a), on_device(b)
    for w in (0.9, -0.7):
        torch._foreach_lerp_(da, db, w)
        torch._foreach_lerp_(a, b, w)
    assert_lists_match(da, a, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_ops_return_fresh_lists(dtype):
    a, b = tensors(dtype, positive=True), tensors(dtype, seed=3)
    da, db = on_device(a), on_device(b)
    cases = [
        ("aten::_foreach_sqrt", lambda x, y: torch._foreach_sqrt(x)),
        ("aten::_foreach_add.List", lambda x, y: torch._foreach_add(x, y, alpha=0.5)),
        ("aten::_foreach_mul.Scalar", lambda x, y: torch._foreach_mul(x, 3.0)),
        ("aten::_foreach_div.ScalarList", lambda x, y: torch._foreach_div(x, [2.0, 3.0, 4.0, 5.0])),
    ]
    for name, fn in cases:
        got, expected = fn(da, db), fn(a, b)
        assert type(got) is type(expected) and ran_natively(name)
        assert_lists_match(got, expected, dtype)
    assert_lists_match(da, a, dtype)  # inputs untouched


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_matches_cpu(dtype):
    a = tensors(dtype) + [torch.randn(300, 129).to(dtype) * 10]
    got = torch._foreach_norm(on_device(a))
    assert ran_natively("aten::_foreach_norm.Scalar")
    assert all(g.dim() == 0 for g in got)
    expected = torch._foreach_norm(a)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5 if dtype == torch.float32 else 2**-7, atol=0)


def test_a_device_scalar_tensor_scales_every_tensor():
    a = tensors(torch.float32)
    da = on_device(a)
    scale = torch.tensor(0.25)
    torch._foreach_mul_(da, scale.to("neuron"))
    torch._foreach_mul_(a, scale)
    assert ran_natively("aten::_foreach_mul_.Tensor")
    assert_lists_match(da, a, torch.float32)


def test_runtime_scalars_reuse_one_program():
    a = tensors(torch.float32)
    da = on_device(a)
    cache = native.entries("aten::_foreach_addcdiv_.ScalarList")
    b, c = tensors(torch.float32, seed=4), tensors(torch.float32, positive=True, seed=5)
    db, dc = on_device(b), on_device(c)
    torch._foreach_addcdiv_(da, db, dc, [0.0] * len(a))
    torch._foreach_addcdiv_(a, b, c, [0.0] * len(a))
    before = len(cache)
    for step in range(1, 4):
        sizes = [-1e-3 / (1 - 0.9**step) * (k + 1) for k in range(len(a))]
        torch._foreach_addcdiv_(da, db, dc, sizes)
        torch._foreach_addcdiv_(a, b, c, sizes)
    assert len(cache) == before
    assert_lists_match(da, a, torch.float32)


def test_a_list_read_as_it_is_written_is_one_operand():
    a = tensors(torch.float32)
    da = on_device(a)
    torch._foreach_add_(da, da)
    torch._foreach_add_(a, a)
    assert ran_natively("aten::_foreach_add_.List")
    assert_lists_match(da, a, torch.float32)


def test_mixed_dtypes_fall_back_and_match():
    a = tensors(torch.float32)
    b = [t.to(torch.bfloat16) for t in tensors(torch.float32, seed=6)]
    da, db = on_device(a), on_device(b)
    torch._foreach_add_(da, db)
    torch._foreach_add_(a, b)
    assert not ran_natively("aten::_foreach_add_.List")
    assert_lists_match(da, a, torch.float32)


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_foreach_optimizers_step_natively_and_match_cpu(name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    params = {"cpu": [p.detach().clone().requires_grad_() for p in model.parameters()]}
    params["neuron"] = [p.detach().to("neuron").requires_grad_() for p in params["cpu"]]
    kwargs = {"lr": 1e-2, "foreach": True, "weight_decay": 0.1}
    if name == "SGD":
        kwargs["momentum"] = 0.9
    optimizers = {d: getattr(torch.optim, name)(ps, **kwargs) for d, ps in params.items()}
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        grads = [torch.randn(p.shape, generator=g) for p in params["cpu"]]
        for d, ps in params.items():
            for p, grad in zip(ps, grads, strict=True):
                p.grad = grad.to(d)
            optimizers[d].step()
    assert not any(op.startswith("aten::_foreach") for op in torch.neuron.get_fallback_ops())
    for d, c in zip(params["neuron"], params["cpu"], strict=True):
        torch.testing.assert_close(d.detach().cpu(), c.detach(), rtol=1e-5, atol=1e-6)


def test_a_runtime_scalar_of_another_type_is_another_signature():
    a = on_device(tensors(torch.float32))
    torch._foreach_sub_(a, 2.0)
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        torch._foreach_sub(a, True)  # the float kernel must not take it: ATen-CPU raises

