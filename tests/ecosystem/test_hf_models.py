"""Tiny random-weight Hugging Face models train on ``neuron`` exactly like on the CPU: one forward
and backward, the loss and every parameter's gradient within rtol 2e-3, the same parameters (tied
embeddings stay one parameter), eagerly and under ``torch.compile(backend="neuron")``.

The compiled runs cost ~5-60 s a model on CI's two cores: GPT-2 (a decoder with tied embeddings)
runs compiled in CI, the rest are ``slow`` (``python -m pytest -m slow tests/ecosystem``).
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from hf_models import MODELS, build, loss_and_grads  # noqa: E402

import neuronsim  # noqa: E402

neuronsim.enable()

COMPILED_IN_CI = {"gpt2"}


def _case(name: str, compiled: bool):
    marks = []
    if compiled and name not in COMPILED_IN_CI:
        marks.append(pytest.mark.slow)
    return pytest.param(name, compiled, marks=marks, id=f"{name}-{'compiled' if compiled else 'eager'}")


@pytest.mark.parametrize("name, compiled", [_case(n, c) for c in (False, True) for n in MODELS])
def test_loss_and_gradients_match_cpu(name, compiled):
    model, batch = build(name)
    cpu_loss, cpu_grads, cpu_params = loss_and_grads(copy.deepcopy(model), batch, "cpu")
    torch._dynamo.reset()
    loss, grads, params = loss_and_grads(model, batch, "neuron", compiled=compiled)
    assert params == cpu_params  # shared weights are still shared
    assert grads.keys() == cpu_grads.keys()
    torch.testing.assert_close(loss, cpu_loss, rtol=2e-3, atol=0)
    for key, expected in cpu_grads.items():
        torch.testing.assert_close(grads[key], expected, rtol=2e-3, atol=1e-6,
                                   msg=lambda m, key=key: f"{key}: {m}")
