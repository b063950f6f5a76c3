"""torch.compile(backend="neuron"): fused point-wise regions, TorchNeuron's rules, metrics."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from neuronsim.device import clock


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    torch.neuron.clear_op_tracking()
    yield


def chain(x, y):
    a = x * 2 + y
    b = torch.tanh(a) - 1.5
    return torch.relu(b) * a, torch.sigmoid(a)


def _device_ns() -> float:
    return sum(e.duration_ns for c in clock.all_clocks().values() for e in c.events())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pointwise_chain_is_one_region_kernel_and_matches_eager(dtype):
    torch.manual_seed(0)
    x, y = torch.randn(300, 70).to(dtype), torch.randn(70).to(dtype)
    dx, dy = x.to("neuron"), y.to("neuron")
    compiled = torch.compile(chain, backend="neuron")
    got = compiled(dx, dy)
    assert any("region" in op for op in torch.neuron.get_executed_ops())
    assert not torch.neuron.get_fallback_ops()
    assert torch.neuron.get_dynamo_metrics()[0]["fused_regions"] == 1
    tol = {} if dtype == torch.float32 else {"rtol": 2**-7, "atol": 2**-7}  # one rounding, not six
    for g, e in zip(got, chain(x, y), strict=True):
        torch.testing.assert_close(g.cpu(), e, **tol)


def test_compiled_region_takes_less_device_time_than_eager():
    x, y = torch.randn(512, 256, device="neuron"), torch.randn(256, device="neuron")
    compiled = torch.compile(chain, backend="neuron")
    compiled(x, y), chain(x, y)  # first calls trace and schedule the kernels
    for c in clock.all_clocks().values():
        c.reset()
    chain(x, y)
    eager = _device_ns()
    for c in clock.all_clocks().values():
        c.reset()
    compiled(x, y)
    assert _device_ns() < 0.5 * eager  # one launch, inputs read once, two results written


def test_training_through_a_compiled_module_matches_eager():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    grads = {}
    for compiled in (False, True):
        m = __import__("copy").deepcopy(model).to("neuron")
        run = torch.compile(m, backend="neuron") if compiled else m
        loss = torch.nn.functional.mse_loss(run(x.to("neuron")), y.to("neuron"))
        loss.backward()
        grads[compiled] = [loss.detach().cpu()] + [p.grad.cpu() for p in m.parameters()]
    for a, b in zip(grads[True], grads[False], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    names = [m["graph_name"] for m in torch.neuron.get_dynamo_metrics()]
    assert names == ["model_default_0_fwd_0", "model_default_0_bwd_0"]


def test_graph_breaks_and_model_name():
    def f(x):
        y = torch.exp(x) * 3
        n = int(y.sum().item())  # a graph break
        return torch.tanh(y) + n

    x = torch.randn(64, device="neuron")
    got = torch.compile(f, backend="neuron", options={"model_name": "mine"})(x)
    torch.testing.assert_close(got.cpu(), f(x.cpu()))
    metrics = torch.neuron.get_dynamo_metrics()
    assert len(metrics) == 2 and all(m["model_name"] == "mine" for m in metrics)
    assert torch._dynamo.utils.counters["neuron"]["compiled_graphs"] == 2


def test_a_new_shape_recompiles_statically_and_dynamic_true_is_rejected():
    compiled = torch.compile(chain, backend="neuron")
    for n in (32, 48, 64):
        compiled(torch.randn(n, 8, device="neuron"), torch.randn(8, device="neuron"))
    assert len(torch.neuron.get_dynamo_metrics()) == 3  # one static graph per shape
    with pytest.raises(Exception, match="requires static shapes"):
        torch.compile(chain, backend="neuron", dynamic=True)(torch.randn(16, 8, device="neuron"),
                                                             torch.randn(8, device="neuron"))


def test_other_modes_warn_and_run_as_default():
    with pytest.warns(UserWarning, match="mode='default'"):
        out = torch.compile(chain, backend="neuron", mode="max-autotune")(
            torch.randn(4, 4, device="neuron"), torch.randn(4, device="neuron"))
    assert out[0].device.type == "neuron"


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_autocast_with_compile(where):
    lin = torch.nn.Linear(8, 8).to("neuron")
    x = torch.randn(4, 8, device="neuron")

    def f(t):
        if where == "inside":
            with torch.autocast("neuron", dtype=torch.bfloat16):
                return torch.softmax(lin(t), -1), lin(t)
        return torch.softmax(lin(t), -1), lin(t)

    compiled = torch.compile(f, backend="neuron")
    if where == "outside":
        with torch.autocast("neuron", dtype=torch.bfloat16):
            soft, out = compiled(x)
    else:
        soft, out = compiled(x)
    assert out.dtype == torch.bfloat16 and soft.dtype == torch.float32
