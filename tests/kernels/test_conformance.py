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
    summary = conformance.run(["add", "mul"], dtypes=(torch.float32,), budget_s=1.0, max_samples=2)
    # 2 ops x (op, in-place variant) x 2 samples
    assert len(summary.rows) == 8 and not any(r.passed for r in summary.rows)
    assert all("kernel exploded" in r.error for r in summary.rows)
