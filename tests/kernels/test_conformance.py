"""The OpInfo conformance runner on a fast subset of op_db: pass rate and that native means native."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest")

import neuronsim.kernels.elementwise  # noqa: E402, F401  (its real kernels, before the manifest lists them)
from neuronsim.kernels import conformance  # noqa: E402

SUBSET = [
    "add",
    "sub",
    "mul",
    "div",
    "exp",
    "tanh",
    "sigmoid",
    "sin",
    "cos",
    "maximum",
    "minimum",
    "eq",
    "lt",
    "clamp",
    "nn.functional.silu",
    "nn.functional.hardswish",
    "neg",
    "sign",
    "nn.functional.elu",
    "pow",
    "fmod",
    "logical_not",
    "bitwise_and",
    "sqrt",
    "rsqrt",
]


def test_subset_pass_rate_and_native_ops():
    summary = conformance.run(SUBSET, dtypes=(torch.float32, torch.bfloat16), budget_s=1.0)
    passed = sum(r.passed for r in summary.rows)
    assert summary.rows and passed / len(summary.rows) >= 0.98, summary.report()
    native = [r for r in summary.rows if r.native]
    assert len(native) >= len(summary.rows) // 2, summary.report()
    # A native row names the kernels that ran; every one is a registered native kernel.
    from neuronsim.kernels.registry import TABLE

    names = {n.removesuffix(".default") for n in TABLE}
    assert all(set(r.native_ops.split(";")) <= names for r in native)
    assert len(summary.native_ops_passed()) >= 15


def test_a_crashing_sample_is_recorded_and_the_run_goes_on(monkeypatch):
    calls = []

    def boom(opinfo, sample, dtype, fn=None):
        calls.append(opinfo.name)
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(conformance, "run_sample", boom)
    summary = conformance.run(["add", "mul"], dtypes=(torch.float32,), budget_s=600.0, max_samples=2)
    # 2 ops x (op, in-place variant) x 2 samples
    assert len(summary.rows) == 8 and not any(r.passed for r in summary.rows)
    assert all("kernel exploded" in r.error for r in summary.rows)


def test_a_random_op_is_compared_with_the_device_under_the_same_seed():
    """randn draws from the device's generator (other numbers than the CPU's): the sample passes
    when a second device run under the OpInfo's seed repeats it, with the CPU's shape and dtype."""
    summary = conformance.run(["randn"], dtypes=(torch.float32,), budget_s=600.0, max_samples=2)
    assert summary.rows and all(r.passed for r in summary.rows), summary.report()
    assert any(r.native and "aten::normal_" in r.native_ops for r in summary.rows)


def test_a_random_op_that_does_not_repeat_under_its_seed_fails(monkeypatch):
    import neuronsim.device.random as device_random

    draws = iter(range(1, 1000))
    monkeypatch.setattr(device_random, "draw_seed", lambda index: next(draws))  # a new seed per call
    summary = conformance.run(["randn"], dtypes=(torch.float32,), budget_s=600.0, max_samples=1)
    assert summary.rows and not any(r.passed for r in summary.rows)



def test_a_low_precision_mismatch_passes_only_when_closer_to_float64_than_the_cpu():
    x = torch.linspace(-3.0, 7.0, 301).to(torch.bfloat16)
    rounded = torch.sum(x.double()).to(torch.bfloat16)  # the float64 sum, rounded once
    ulp = torch.finfo(torch.bfloat16).eps * rounded.abs()
    cpu = [rounded + 2 * ulp]  # a CPU result two ulps off
    sample = (x, (), {})  # (input, args, kwargs), as run_sample holds its CPU copy
    ok, msg = conformance._closer_to_float64(torch.sum, sample, [rounded], cpu, "mismatch")
    assert ok and msg.startswith("closer to float64 than the CPU")
    ok, msg = conformance._closer_to_float64(torch.sum, sample, [rounded - 4 * ulp], cpu, "mismatch")
    assert not ok and msg == "mismatch"

def test_conv_transpose2d_bfloat16_is_judged_against_float64():
    # ATen's bfloat16 grouped, dilated conv_transpose2d rounds intermediates; the device's result
    # differs from it by two bf16 ulps but is the closer of the two to the float64 result.
    summary = conformance.run(["nn.functional.conv_transpose2d"], dtypes=(torch.bfloat16,), budget_s=60.0,
                              max_samples=4)
    assert summary.rows and all(r.passed for r in summary.rows), summary.report()
    assert any(r.error.startswith("closer to float64") for r in summary.rows)


def test_an_in_place_sample_that_broadcasts_self_is_skipped_as_pytorch_skips_it():
    from torch.testing._internal.common_methods_invocations import op_db

    addbmm = next(o for o in op_db if o.name == "addbmm")
    broadcast = [s for s in addbmm.sample_inputs("cpu", torch.float32) if s.broadcasts_input]
    assert broadcast  # ATen-CPU's addbmm_ resizes such a self instead of refusing it
    assert conformance.run_sample(addbmm, broadcast[0], torch.float32, addbmm.inplace_variant) is None
