"""Fused Adam/AdamW (``_fused_adam_``, ``_fused_adamw_``) against ATen-CPU's fused kernel."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, ran_natively, tolerance

import neuronsim
import neuronsim.kernels.optim  # noqa: F401  (registers the real kernels)
from neuronsim.device import native

# odd sizes, a 0-dim and a 1-element param, one past a full [128, 2048] tile
SHAPES = [(33, 7), (130,), (), (1,), (129, 2049)]
KWARGS = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


def make_params(dtype, shapes=SHAPES, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]
    # a transposed (non-contiguous) param: its states and grads share its strides
    cpu.append(torch.randn(9, 40, generator=g).to(dtype).t().requires_grad_())
    return {"cpu": cpu, "neuron": [p.detach().to("neuron").requires_grad_() for p in cpu]}


def run_steps(name, params, steps=5, seed=1, after_step=None, **kwargs):
    """``steps`` steps of ``torch.optim.<name>(fused=True)`` on both devices, the same grads;
    ``after_step(device, optimizer, step)`` runs after each (a schedule); a keyword given as a dict
    has a value per device."""
    optimizers = {d: getattr(torch.optim, name)(
        ps, fused=True, **{k: v[d] if isinstance(v, dict) else v for k, v in kwargs.items()})
        for d, ps in params.items()}
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        grads = [torch.randn(p.shape, generator=g).to(p.dtype) for p in params["cpu"]]
        for d, ps in params.items():
            for p, grad in zip(ps, grads, strict=True):
                p.grad = like(grad.to(d), p)
            optimizers[d].step()
            if after_step is not None:
                after_step(d, optimizers[d], step)
    return optimizers


def like(grad, param):
    """``grad`` in ``param``'s layout, as autograd's gradient layout contract gives it."""
    return torch.empty_like(param).copy_(grad)


def assert_states_match(optimizers, params, **tol):
    for dev, cpu in zip(params["neuron"], params["cpu"], strict=True):
        tol = tol or tolerance(cpu.dtype)
        torch.testing.assert_close(dev.detach().cpu(), cpu.detach(), **tol)
        state = optimizers["neuron"].state[dev]
        expected = optimizers["cpu"].state[cpu]
        assert set(state) == set(expected)
        for key, value in expected.items():
            assert state[key].device.type == "neuron"
            torch.testing.assert_close(state[key].cpu(), value, **tol)


CONFIGS = {
    "plain": {},
    "weight_decay": {"weight_decay": 0.1, "betas": (0.8, 0.95)},
    "amsgrad_maximize": {"amsgrad": True, "maximize": True, "weight_decay": 0.05},
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_five_steps_match_cpu(dtype, name, config):
    params = make_params(dtype)
    optimizers = run_steps(name, params, **CONFIGS[config])
    assert ran_natively(f"aten::_fused_{name.lower()}_")
    assert not torch.neuron.get_fallback_ops()
    assert_states_match(optimizers, params)
    assert all(optimizers["neuron"].state[p]["step"].item() == 5 for p in params["neuron"])


def entries_of(name):
    return [e for e in native.entries(name).values() if not native.is_declined(e)]


def test_one_program_serves_every_step_and_learning_rate():
    params = make_params(torch.float32, shapes=[(17, 3), (250,)], seed=2)
    cache = native.entries("aten::_fused_adamw_.default")
    sizes = []

    def halve_lr(device, optimizer, step):  # a schedule: a new lr (and step count) every step
        optimizer.param_groups[0]["lr"] *= 0.5
        if device == "neuron":
            sizes.append(len(cache))

    optimizers = run_steps("AdamW", params, steps=4, after_step=halve_lr, lr=1e-2, weight_decay=0.1)
    assert sizes[1:] == sizes[:-1]  # steps 2-4 traced nothing
    assert ran_natively("aten::_fused_adamw_")
    assert_states_match(optimizers, params)


def test_a_host_lr_tensor_runs_the_float_programs():
    """``lr=torch.tensor(...)`` stays on the host (``_fused_adam`` moves only a device lr), so the
    ``tensor_lr`` overload arrives with a CPU lr: it is the float overload's runtime value."""
    params = make_params(torch.bfloat16, shapes=[(40, 5), (7,)], seed=4)
    cache = native.entries("aten::_fused_adam_.default")
    sizes = []

    def set_lr(device, optimizer, step):  # what a tensor-lr schedule does: the tensor in place
        optimizer.param_groups[0]["lr"].fill_(1e-2 / (step + 2))
        if device == "neuron":
            sizes.append(len(cache))

    lrs = {d: torch.tensor(1e-2) for d in params}  # one per optimizer: each schedule sets its own
    optimizers = run_steps("Adam", params, steps=3, after_step=set_lr, lr=lrs)
    assert sizes[1:] == sizes[:-1]
    assert ran_natively("aten::_fused_adam_.tensor_lr")
    assert_states_match(optimizers, params)


def direct_args(device, dtype=torch.float32, n=3, seed=6, step=1.0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 4), (130,), (2, 3, 7)][:n]

    def lst(positive=False):
        ts = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        return [(t.abs() if positive else t).to(device) for t in ts]

    params, grads, exp_avgs, exp_avg_sqs = lst(), lst(), lst(), lst(positive=True)
    steps = [torch.tensor(step, device=device) for _ in shapes]
    return params, grads, exp_avgs, exp_avg_sqs, [], steps


def call_both(fn, *args_fns):
    """``fn(*lists)`` on device and CPU copies of the same lists; returns both lists of lists."""
    cpu = direct_args("cpu", *args_fns)
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    fn(*dev)
    fn(*cpu)
    return dev, cpu


def assert_lists_match(dev, cpu, **tol):
    for dl, cl in zip(dev, cpu, strict=True):
        for d, c in zip(dl, cl, strict=True):
            torch.testing.assert_close(d.cpu(), c, **(tol or tolerance(c.dtype)))


@pytest.mark.parametrize("step", [1.0, 1e4, 1e7])
def test_bias_corrections_are_computed_on_the_device_at_any_step(step):
    """``1 - beta^step`` from the step tensor: exact at step 1 (no cancellation) and saturating."""
    def fn(*lists):
        torch._fused_adam_(*lists, **{**KWARGS, "beta2": 0.9999})

    cpu = direct_args("cpu", torch.float32, 3, 7, step)
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    fn(*dev)
    fn(*cpu)
    assert ran_natively("aten::_fused_adam_")
    assert_lists_match(dev, cpu)


def test_beta1_zero_and_a_large_lerp_weight():
    """beta1 = 0 (bias correction 1 for every step) and beta1 = 0.3 (lerp's other side)."""
    for beta1 in (0.0, 0.3):
        dev, cpu = call_both(lambda *ls, b=beta1: torch._fused_adamw_(*ls, **{**KWARGS, "beta1": b}))
        assert ran_natively("aten::_fused_adamw_")
        assert_lists_match(dev, cpu)


def test_more_params_than_partitions():
    """Step counts are broadcast in blocks of 128: 130 params (each its own step) need two."""
    params = make_params(torch.float32, shapes=[(2 + i % 3,) for i in range(130)], seed=9)
    optimizers = run_steps("Adam", params, steps=2)
    with torch.no_grad():  # one param one step ahead: every param must read its own step
        optimizers["neuron"].state[params["neuron"][129]]["step"] += 1
        optimizers["cpu"].state[params["cpu"][129]]["step"] += 1
    for optimizer in optimizers.values():
        optimizer.step()
    assert ran_natively("aten::_fused_adam_")
    assert_states_match(optimizers, params)


def test_lists_of_mixed_dtypes_update_each_position_in_its_dtype():
    cpu = direct_args("cpu")
    for lst in cpu[:4]:
        lst[1] = lst[1].to(torch.bfloat16)
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    for lists in (dev, cpu):
        torch._fused_adam_(*lists, **{**KWARGS, "weight_decay": 0.01})
    assert ran_natively("aten::_fused_adam_")
    for dl, cl in zip(dev, cpu, strict=True):
        for d, c in zip(dl, cl, strict=True):
            torch.testing.assert_close(d.cpu(), c, **tolerance(c.dtype))


def test_nan_and_inf_grads_propagate_as_on_cpu():
    cpu = direct_args("cpu")
    cpu[1][0][0, 0] = float("nan")
    cpu[1][1][3] = float("inf")
    cpu[1][2][1, 2, 5] = -float("inf")
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    for lists in (dev, cpu):
        torch._fused_adam_(*lists, **KWARGS)
    assert ran_natively("aten::_fused_adam_")
    assert_lists_match(dev, cpu, equal_nan=True, **tolerance(torch.float32))
    assert dev[0][0][0, 0].isnan().item() and dev[2][1][3].isinf().item()


def test_grad_scale_and_found_inf_fall_back_and_match():
    """AMP's unscale-and-skip (the grads are written too) is not covered: the host computes it."""
    cpu = direct_args("cpu")
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    for lists, d in ((dev, "neuron"), (cpu, "cpu")):
        scale, found = torch.tensor(4.0, device=d), torch.tensor(0.0, device=d)
        torch._fused_adam_(*lists, **KWARGS, grad_scale=scale, found_inf=found)
    assert not ran_natively("aten::_fused_adam_")
    assert "aten::_fused_adam_" in torch.neuron.get_fallback_ops()
    assert_lists_match(dev, cpu)


def test_a_device_lr_tensor_falls_back_and_matches():
    cpu = direct_args("cpu")
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    for lists, d in ((dev, "neuron"), (cpu, "cpu")):
        torch._fused_adamw_(*lists, **{**KWARGS, "lr": torch.tensor(1e-2, device=d), "weight_decay": 0.1})
    assert not ran_natively("aten::_fused_adamw_.tensor_lr")
    assert_lists_match(dev, cpu)


def test_one_state_tensor_written_twice_falls_back():
    """exp_avgs and exp_avg_sqs being the same tensors: ATen's order decides, so the host runs it."""
    cpu = direct_args("cpu")
    cpu = (cpu[0], cpu[1], cpu[3], cpu[3], [], cpu[5])
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    dev[3] = dev[2]
    for lists in (dev, cpu):
        torch._fused_adam_(*lists, **KWARGS)
    assert not ran_natively("aten::_fused_adam_")
    assert_lists_match(dev, cpu)


@pytest.mark.parametrize("lr", [1e-2, "host tensor"])
def test_fast_numerics_give_atens_bits_and_both_executors_the_same(lr):
    kwargs = {**KWARGS, "lr": torch.tensor(1e-2) if lr == "host tensor" else lr, "weight_decay": 0.1,
              "amsgrad": True}

    def run(device, **opts):
        lists = list(direct_args("cpu"))
        lists[4] = [t.abs() for t in lists[3]]  # max_exp_avg_sqs
        lists = [[t.to(device) for t in lst] for lst in lists]
        with neuronsim.options(**opts):
            torch._fused_adamw_(*lists, **kwargs)
        return [[t.cpu() for t in lst] for lst in lists]

    expected, fast = run("cpu"), run("neuron", numerics="fast")
    numba, reference = run("neuron"), run("neuron", executor="reference")
    assert ran_natively("aten::_fused_adamw_" + (".tensor_lr" if lr == "host tensor" else ""))
    for e, f, n, r in zip(sum(expected, []), sum(fast, []), sum(numba, []), sum(reference, []), strict=True):
        assert torch.equal(f, e) and torch.equal(n, r)
        torch.testing.assert_close(n, e)


def test_tensors_of_different_layouts_fall_back_and_match():
    """ATen-CPU pairs elements in memory order: a transposed param with a contiguous grad is left
    to it (the device result is then ATen's, whatever it means)."""
    cpu = direct_args("cpu")
    cpu[0][0] = cpu[0][0].t().contiguous().t()  # same values, the other layout
    dev = [[t.to("neuron") for t in lst] for lst in cpu]
    dev[0][0] = dev[0][0].t().contiguous().t()
    for lists in (dev, cpu):
        torch._fused_adam_(*lists, **KWARGS)
    assert not ran_natively("aten::_fused_adam_")
    assert_lists_match(dev, cpu)


def test_invalid_lists_raise_torchs_error():
    dev = [[t.to("neuron") for t in lst] for lst in direct_args("cpu")]
    dev[2] = dev[2][:2]  # one exp_avg short
    with pytest.raises(RuntimeError):
        torch._fused_adam_(*dev, **KWARGS)
    dev = [[t.to("neuron") for t in lst] for lst in direct_args("cpu")]
    with pytest.raises(RuntimeError):  # max_exp_avg_sqs without amsgrad
        torch._fused_adam_(*dev[:4], dev[3], dev[5], **KWARGS)


def kernel_ns(shapes, dtype=torch.float32):
    """Simulated time of one fused Adam step over params of ``shapes``."""
    params = [torch.zeros(s, dtype=dtype, device="neuron", requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.ones_like(p)
    torch.optim.Adam(params, fused=True).step()
    signature = tuple((dtype, torch.Size(s)) for s in shapes)
    (entry,) = [e for e in entries_of("aten::_fused_adam_.default") if e.signature[:len(shapes)] == signature]
    return entry.duration_ns


def test_simulated_time_scales_with_the_bytes():
    """The Program streams the tensors: 4x the elements costs about 4x, bf16 no more than fp32."""
    small, large = kernel_ns([(1024, 512)]), kernel_ns([(4096, 512)])
    assert 2.5 < large / small < 4.5
    assert kernel_ns([(4096, 512)], torch.bfloat16) <= large


def test_small_tensors_move_side_by_side():
    """A small tensor's transfers are bound by the DMA's fixed cost: spread over the engines, eight
    biases cost far less than eight times one (each in its own 128-partition tile: about 6x)."""
    assert kernel_ns([(64,)] * 8) < 2.5 * kernel_ns([(65,)])
