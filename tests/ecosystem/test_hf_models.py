"""Tiny random-weight Hugging Face models train on ``neuron`` exactly like on the CPU, checked by
the model sweep's own harness (``neuronsim.sweep.hf_check``: one forward, backward and AdamW step —
the loss, every gradient and every parameter after the step within rtol 2e-3, the same parameters,
so tied embeddings stay one parameter), eagerly and under ``torch.compile(backend="neuron")``, and
greedy ``generate()``.

Twelve architectures of issue 16 here; all 56 of the sweep: ``python -m neuronsim.sweep``
(docs/compat.md). The compiled runs cost ~5-60 s a model on CI's two cores: GPT-2 (a decoder with
tied embeddings) runs compiled in CI, the rest are ``slow`` (``python -m pytest -m slow tests/ecosystem``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from neuronsim.sweep import hf_check, hf_zoo  # noqa: E402

MODELS = ("gpt2", "opt", "bloom", "falcon", "gemma", "bert", "roberta", "distilbert", "electra", "t5", "bart",
          "mixtral")
IN_CI = {("gpt2", "compiled"), ("gpt2", "generate")}


def _case(name: str, mode: str):
    marks = [pytest.mark.slow] if mode != "eager" and (name, mode) not in IN_CI else []
    return pytest.param(name, mode, marks=marks, id=f"{name}-{mode}")


CASES = [_case(n, m) for m in ("eager", "compiled", "generate") for n in MODELS
         if m != "generate" or hf_zoo.BY_NAME[n].generates]


@pytest.mark.parametrize("name, mode", CASES)
def test_model_matches_the_cpu(name, mode):
    result = hf_check.check(hf_zoo.BY_NAME[name], mode)
    assert result.passed, f"{result.status}: {result.detail}"


@pytest.mark.slow  # ~2 min: two compiled hubert steps
def test_a_second_compile_in_one_process_matches_the_cpu():
    """hubert's feature encoder passes Dynamo's recompile limit, so its convolutions run eagerly
    with Dynamo's frame hook on; the device's kernels must stay out of Dynamo there (a compiled
    copy of the runtime gave a second compile 1.5x the CPU's loss)."""
    for _ in range(2):
        result = hf_check.check(hf_zoo.BY_NAME["hubert"], "compiled")
        assert result.passed, f"{result.status}: {result.detail}"
