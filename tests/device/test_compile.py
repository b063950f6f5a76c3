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


def test_cpu_inputs_are_copied_to_the_device_and_results_stay_there():
    torch.manual_seed(2)
    x, y = torch.randn(40, 24), torch.randn(24)
    got = torch.compile(chain, backend="neuron")(x, y)
    assert all(g.device.type == "neuron" for g in got)
    assert any("region" in op for op in torch.neuron.get_executed_ops())  # it ran on the device
    for g, e in zip(got, chain(x, y), strict=True):
        torch.testing.assert_close(g.cpu(), e)


def test_a_device_module_trains_on_a_cpu_batch_and_cpu_leaves_get_their_gradients():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    reference = __import__("copy").deepcopy(model)
    model.to("neuron")
    x = torch.randn(8, 16, requires_grad=True)  # a CPU leaf: its gradient comes back to the CPU
    out = torch.compile(model, backend="neuron")(x)
    assert out.device.type == "neuron"
    out.square().sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    reference(x_ref).square().sum().backward()
    torch.testing.assert_close(out.cpu(), reference(x_ref).detach(), rtol=1e-5, atol=1e-6)
    assert x.grad is not None and x.grad.device.type == "cpu"
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert p.grad.device.type == "neuron"
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


def test_cpu_autocopy_can_be_turned_off_and_results_can_keep_the_input_device(monkeypatch):
    x, y = torch.randn(8, 4), torch.randn(4)
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    with pytest.raises(Exception, match="Input tensor at index 0 is on cpu device"):
        torch.compile(chain, backend="neuron")(x, y)
    monkeypatch.delenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY")
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_RETAIN_DEVICE_MODE", "1")
    got = torch.compile(chain, backend="neuron")(x, y)
    assert all(g.device.type == "cpu" for g in got)
    assert any("region" in op for op in torch.neuron.get_executed_ops())
    for g, e in zip(got, chain(x, y), strict=True):
        torch.testing.assert_close(g, e)


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


# ---------------------------------------------------------------- fusion across row-wise ops


def attention_probs(scores, mask):
    return torch.softmax((scores * 0.25).masked_fill(~mask, float("-inf")), dim=-1)


def residual_norm(x, pos, w, b):
    h = x + pos  # pos broadcast over the batch
    return h, torch.nn.functional.layer_norm(h, (x.shape[-1],), w, b)


def _executed():
    return torch.neuron.get_executed_ops()


def _close(got, want, tol):
    """``got`` against an fp32 reference; bf16 tolerances scale with the tensor's magnitude."""
    atol = tol.get("atol", 1e-5) * max(1.0, want.abs().nan_to_num(0, 0, 0).max().item())
    torch.testing.assert_close(got.float(), want, rtol=tol.get("rtol", 1.3e-6), atol=atol,
                               equal_nan=tol.get("equal_nan", False))


def _grads_match(f, cpu_args, tol, make_grad):
    """Forward and backward of ``torch.compile(f)`` on the device against ``f`` on the CPU in fp32."""
    dev = [a.to("neuron").requires_grad_(a.is_floating_point()) for a in cpu_args]
    ref = [(a.float() if a.is_floating_point() else a).requires_grad_(a.is_floating_point())
           for a in cpu_args]
    got, want = torch.compile(f, backend="neuron")(*dev), f(*ref)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    grads = [make_grad(w) for w in want]
    torch.autograd.backward(got, [g.to(dtype=dev[0].dtype, device="neuron") for g in grads])
    torch.autograd.backward(want, [g.to(dev[0].dtype).float() for g in grads])
    for g, w in zip(got, want, strict=True):
        _close(g.detach().cpu(), w.detach(), tol)
    for d, r in zip(dev, ref, strict=True):
        if r.grad is not None:
            _close(d.grad.cpu(), r.grad, tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_mask_softmax_is_one_kernel_forward_and_backward(dtype):
    torch.manual_seed(2)
    t = 24  # rows of 24: 5 heads per 128-partition tile, a partial last tile
    scores = torch.randn(3, 5, t, t).to(dtype)
    scores[0, 0, 3, 1] = float("nan")  # NaN in a kept position propagates to its row, as in ATen
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))  # [T, T] broadcast over [B, H, T, T]
    tol = {"equal_nan": True, **({} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2})}
    _grads_match(attention_probs, [scores, mask], tol, lambda w: torch.randn(w.shape))
    ops = _executed()
    assert not torch.neuron.get_fallback_ops()
    assert not {"aten::_softmax", "aten::_softmax_backward_data", "aten::masked_fill_.Scalar"} & set(ops)
    assert sum("neuronsim_fused::region" in op for op in ops) >= 2  # forward and backward regions
    assert [m["fused_regions"] for m in torch.neuron.get_dynamo_metrics()] == [1, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_add_layer_norm_and_its_backward_fuse(dtype):
    torch.manual_seed(3)
    x, pos = torch.randn(3, 50, 48).to(dtype), torch.randn(50, 48).to(dtype)  # 150 rows: a partial tile
    w, b = torch.randn(48).to(dtype), torch.randn(48).to(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 4e-2, "atol": 4e-2}
    _grads_match(residual_norm, [x, pos, w, b], tol, lambda v: torch.randn(v.shape))
    ops = _executed()
    assert not torch.neuron.get_fallback_ops()
    assert "aten::native_layer_norm" not in ops and any("region" in op for op in ops)


def test_layer_norm_backward_takes_the_residual_gradient_add():
    def block(x, w, b):
        h = torch.nn.functional.layer_norm(x, (32,), w, b)
        return x + h * h  # backward: grad(x) = grad + layer_norm_backward(...)

    torch.manual_seed(4)
    args = [torch.randn(4, 40, 32), torch.randn(32), torch.randn(32)]
    _grads_match(block, args, {"rtol": 1e-4, "atol": 1e-4}, lambda v: torch.randn(v.shape))
    assert "aten::native_layer_norm_backward" not in _executed()


def test_rows_too_long_for_sbuf_keep_the_library_kernel():
    x = torch.randn(4, 3000)
    got = torch.compile(lambda t: torch.softmax(t * 2.0, -1), backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.softmax(x * 2.0, -1))
    assert "aten::_softmax" in _executed() and not torch.neuron.get_fallback_ops()


def _train_gpt_step_profile(compiled: bool, steps: int = 3):
    """(losses, device ns, HBM bytes of the native kernels, kernel count) of train_gpt's last step."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_gpt

    args = train_gpt.parse_args(["--steps", str(steps), "--batch", "4", "--block", "16", "--quiet",
                                 *(["--compile"] if compiled else [])])
    model, optimizer, schedule, batches = train_gpt.build(args)
    losses = []
    for step in range(steps):
        if step == steps - 1:  # the steady state: kernels traced, graphs compiled
            for c in clock.all_clocks().values():
                c.reset()
        idx, targets = (t.to("neuron") for t in batches[step % len(batches)])
        losses.append(train_gpt.train_step(model, optimizer, schedule, idx, targets).item())
    events = [e for c in clock.all_clocks().values() for e in c.events() if e.kind not in ("h2d", "d2h")]
    kernels = [e for e in events if e.kind == "kernel"]
    return losses, sum(e.duration_ns for e in events), sum(e.bytes for e in kernels), len(kernels)


def test_train_gpt_compiled_matches_eager_with_less_device_time_and_hbm_traffic():
    eager = _train_gpt_step_profile(compiled=False)
    compiled = _train_gpt_step_profile(compiled=True)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-5)
    assert compiled[3] < eager[3] - 10  # fused regions: fewer launches...
    assert compiled[2] < 0.985 * eager[2]  # ...and fewer HBM round trips (the optimizer is eager in both)
    assert compiled[1] < eager[1]
    assert any("region" in op for op in torch.neuron.get_executed_ops())


def _with_a_graph_break(x):
    scale = (x * 2).sum().item()  # .item() breaks the graph: it runs eagerly, Dynamo's hook on
    return x + scale


def test_dynamo_never_compiles_the_devices_own_kernels():
    """Kernels the dispatcher calls from eager code between graph breaks run outside Dynamo: a
    compiled copy of the device's runtime reused one signature's Program for another (hubert's
    loss 1.5x the CPU's on a second compile in one process)."""
    from torch._dynamo.convert_frame import input_codes

    x = torch.arange(12.0).reshape(3, 4)
    compiled = torch.compile(_with_a_graph_break, backend="neuron")
    got = compiled(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), _with_a_graph_break(x))
    seen = [ref() for ref in input_codes.seen if ref() is not None]
    ours = sorted({f"{c.co_filename}:{c.co_name}" for c in seen if "/neuronsim/" in c.co_filename})
    assert not ours, f"Dynamo compiled frames of {ours}"
