"""NKI kernels on neuron tensors: called directly, through ``wrap_nki`` and as ``nki_op`` custom ops,
eagerly and inside ``torch.compile(backend="neuron", fullgraph=True)`` — the cases of TorchNeuron's
own NKI integration tests (kernels.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_neuronx
from nki_test_kernels import P, add_alias_mul, add_kernel, grid_of, scaled_add_inplace, two_outputs
from torch_neuronx import nki_op, wrap_nki

from neuronsim.device import clock
from neuronsim.errors import InputError


def _inputs(seed=0, shape=(256, 1024)):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g), torch.rand(shape, generator=g)


@nki_op("nxtest::add_op", mutates_args={})
def add_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(add_kernel)[grid_of(a, b)](a, b)


@nki_op("nxtest::add_inplace_and_mul", mutates_args={"a"})
def add_inplace_and_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    e, _ = wrap_nki(add_alias_mul)[grid_of(a, b)](a, b)
    return e


@nki_op("nxtest::scaled_add", mutates_args={"b"})
def scaled_add(a: torch.Tensor, scale: float, b: torch.Tensor) -> None:
    wrap_nki(scaled_add_inplace)[grid_of(a, b)](a, scale, b)


def op_func(a, b):
    c, d = a * 2, b + 3
    return add_op(c, d) * c


def op_aliased_func(a, b):
    c, d = a * 2, b + 3
    return add_inplace_and_mul(c, d) + c


def wrapped_aliased_func(a, b):
    c, d = a * 2, b + 3
    e, _ = wrap_nki(add_alias_mul)[grid_of(a, b)](c, d)
    return e + c


def direct_call_func(a, b):
    return add_kernel[2, 2](a * 2, b) - a


def ref_func(a, b):
    return (a * 2 + b + 3) * (a * 2)


def ref_aliased(a, b):
    return (a * 2) * (b + 3) + (a * 2 + b + 3)


CASES = {
    "nki_op": (op_func, ref_func),
    "nki_op mutating": (op_aliased_func, ref_aliased),
    "wrap_nki mutating": (wrapped_aliased_func, ref_aliased),
    "direct @nki.jit call": (direct_call_func, lambda a, b: a * 2 + b - a),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", list(CASES))
def test_kernels_match_cpu_eager_and_compiled(case, compiled):
    fn, ref = CASES[case]
    a, b = _inputs()
    run = torch.compile(fn, backend="neuron", fullgraph=True) if compiled else fn
    out = run(a.to("neuron"), b.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), ref(a, b), rtol=1e-5, atol=1e-5)


def test_direct_call_runs_in_place_on_device_memory_and_charges_the_clock():
    a, b = _inputs(1, (128, 512))
    da, db = a.to("neuron"), b.to("neuron")
    torch_neuronx.clear_op_tracking()
    before_bytes = torch_neuronx.memory_allocated()
    before_ns = clock.clock(0).now_ns
    out, same = add_alias_mul[1, 1](da, db)
    assert same is da  # a returned argument is that argument, written in place
    torch.testing.assert_close(da.cpu(), a + b)
    torch.testing.assert_close(out.cpu(), a * b)
    assert torch_neuronx.memory_allocated() - before_bytes == out.untyped_storage().nbytes()  # HBM ledger
    events = [e for e in clock.clock(0).events() if e.name == "nki:add_alias_mul"]
    assert events and events[-1].kind == "kernel" and events[-1].duration_ns > 0
    assert clock.clock(0).now_ns > before_ns + events[-1].duration_ns
    assert "nki:add_alias_mul" in torch_neuronx.get_executed_ops()
    assert not torch_neuronx.get_fallback_ops()


def test_non_contiguous_argument_written_back_in_place():
    a, b = _inputs(2, (512, 128))
    da = a.to("neuron").t()  # [128, 512], transposed strides
    db = b.t().contiguous().to("neuron")
    scaled_add_inplace[1, 1](db, 2.0, da)
    torch.testing.assert_close(da.cpu(), a.t() + 2.0 * b.t())


def test_in_place_op_on_a_graph_input_under_compile():
    a, b = _inputs(3)
    da, db = a.to("neuron"), b.to("neuron")

    def fn(x, y):
        scaled_add(x * 2, 2.5, y)
        return y + 1

    out = torch.compile(fn, backend="neuron", fullgraph=True)(da, db)
    torch.testing.assert_close(db.cpu(), b + 5 * a)  # the graph input was written, as in eager
    torch.testing.assert_close(out.cpu(), b + 5 * a + 1)


def test_several_outputs_from_a_compiled_module_on_neuron():
    @nki_op("nxtest::two_outputs")
    def add_two(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return wrap_nki(two_outputs)(a, b, c)

    class Model(torch.nn.Module):
        def forward(self, a, b, c):
            return add_two(a, b, c)

    a, b, c = (torch.full((4, 3), v, dtype=torch.bfloat16) for v in (1.0, 2.0, 4.0))
    model = torch.compile(Model().to("neuron:0"), backend="neuron", fullgraph=True)
    ab, ac = model(a.to("neuron:0"), b.to("neuron:0"), c.to("neuron:0"))
    assert ab.dtype == torch.bfloat16
    torch.testing.assert_close(ab.cpu(), a + b)
    torch.testing.assert_close(ac.cpu(), a + c)


def test_nki_op_with_register_autograd_trains_like_cpu():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "nki_ops" / "nki_op_training.py"
    spec = importlib.util.spec_from_file_location("nki_op_training", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    x = torch.randn(P, 16, requires_grad=True)
    dx = x.detach().to("neuron").requires_grad_()
    example.silu(dx).pow(2).sum().backward()
    F.silu(x).pow(2).sum().backward()
    torch.testing.assert_close(dx.grad.cpu(), x.grad, rtol=2e-3, atol=1e-5)
    reference = example.train("cpu", F.silu, compiled=False, steps=2)
    for compiled in (False, True):
        losses = example.train("neuron", example.silu, compiled, steps=2)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=2e-3, atol=1e-5)


def test_mixing_cpu_and_neuron_tensors_is_a_clear_error():
    a, b = _inputs(4, (128, 512))
    with pytest.raises(InputError, match="both neuron and CPU tensors"):
        add_kernel(a.to("neuron"), b)


def test_64_bit_tensors_are_refused_by_name():
    a = torch.ones(128, 512, dtype=torch.float64).to("neuron")
    with pytest.raises(InputError, match="float64"):
        add_kernel(a, a)
