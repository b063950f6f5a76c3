"""The model sweep's Hugging Face check on a few architectures (the full sweep is
``python -m neuronsim.sweep``, docs/compat.md): a tiny model's step and generate() on ``neuron``
against the CPU, and that the check fails when the device disagrees."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the test extra)")

import torch  # noqa: E402

import neuronsim  # noqa: E402
from neuronsim.sweep import hf_check, hf_zoo, report, scripts  # noqa: E402

neuronsim.enable()


def test_a_check_reports_native_share_and_what_ran():  # (the models themselves: tests/ecosystem)
    result = hf_check.check(hf_zoo.BY_NAME["bert_classifier"], "eager")
    assert result.passed, result.detail
    assert result.device.share is not None and result.device.share > 0.8
    assert "aten::mm" in result.device.executed or "aten::addmm" in result.device.executed


def test_a_disagreeing_device_fails_the_check(monkeypatch):
    real = hf_check.train_step

    def off_by_a_little(model, batch, device, compiled=False):
        loss, grads, params, count = real(model, batch, device, compiled)
        if device == "neuron":
            name = next(iter(grads))
            grads[name] = grads[name] * 1.01
        return loss, grads, params, count

    monkeypatch.setattr(hf_check, "train_step", off_by_a_little)
    result = hf_check.check(hf_zoo.BY_NAME["llama"], "eager")
    assert result.status == "fail" and result.detail.startswith("grad ")


def test_an_error_is_a_row_not_the_end(monkeypatch):
    def broken(arch):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(hf_check, "build", broken)
    result = hf_check.check(hf_zoo.BY_NAME["llama"], "eager")
    assert result.status == "error" and result.detail.startswith("RuntimeError: boom (")


def test_the_zoo_spans_the_groups_the_issue_names():
    groups = {a.group for a in hf_zoo.ARCHS}
    assert groups == {"decoder", "moe", "encoder", "seq2seq", "vision", "audio", "multimodal"}
    assert len(hf_zoo.ARCHS) >= 40 and len(hf_zoo.BY_NAME) == len(hf_zoo.ARCHS)
    tied = hf_zoo.build("gpt2")[0]
    assert tied.lm_head.weight is tied.transformer.wte.weight  # tied weights are in the sweep


def test_the_report_counts_and_tabulates():
    checks = [hf_check.Check("a", "decoder", "eager"),
              hf_check.Check("a", "decoder", "generate", "fail", "x|y"),
              hf_check.Check("b", "encoder", "eager", "error", "E")]
    checks[0].device.native_ns, checks[0].device.fallback_ns = 3.0, 1.0
    checks[0].device.fallbacks = {"aten::cat": 2}
    assert report.totals(checks) == {"eager": (1, 2), "generate": (0, 1)}
    run = scripts.ScriptRun("nanogpt", "fail", "loss 3 differs")
    run.device.native_ns, run.device.fallback_ns, run.device.fallbacks = 99.0, 1.0, {"aten::cat": 4}
    md = report.markdown(checks, [run], "python -m neuronsim.sweep", "env")
    assert "| `nanogpt.py` | `--max-iters 6` | FAIL | 99.0% | cat x4 | loss 3 differs |" in md
    assert "| eager | 1/2 (50.0%) |" in md
    assert "| a | pass | — | FAIL | 75.0% | cat | generate: x\\|y |" in md
    assert "## encoder" in md and "| b | ERROR |" in md
    assert torch.neuron.is_available()


def test_json_round_trips_into_the_same_table(tmp_path):
    c = hf_check.Check("a", "decoder", "eager", "fail", "x")
    c.device.native_ns, c.device.fallback_ns, c.device.fallbacks = 3.0, 1.0, {"aten::cat": 2}
    r = scripts.ScriptRun("nanogpt", cpu=[1.0], neuron=[1.0])
    r.device.native_ns, r.device.fallback_ns = 1.0, 0.0
    checks, runs = report.from_json(report.as_json([c], [r]))
    assert report.markdown(checks, runs, "cmd", "env") == report.markdown([c], [r], "cmd", "env")


def test_tabulating_several_files_keeps_the_last_check_of_each_mode(tmp_path):
    from neuronsim.sweep.__main__ import tabulate

    old, new = hf_check.Check("a", "decoder", "eager", "fail", "x"), hf_check.Check("a", "decoder", "eager")
    for c in (old, new):
        c.device.native_ns, c.device.fallback_ns = 1.0, 0.0
    paths = []
    for name, c in (("old", old), ("new", new)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(report.as_json([c]))
    tabulate([str(p) for p in paths], str(tmp_path / "compat.md"))
    md = (tmp_path / "compat.md").read_text()
    assert "| eager | 1/1 (100.0%) |" in md
