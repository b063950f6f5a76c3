"""The ecosystem's own Neuron detection, run for real: transformers (``is_torch_neuron_available``:
``torch_neuronx`` importable and ``torch.neuron.is_available()``) and accelerate
(``is_neuron_available``, the same test) pick the ``neuron`` device under NEURON_SIM=1 and the CPU
without it; Trainer trains on ``neuron`` and leaves a model the user put there where it is; a PEFT
LoRA model trains there too. Each case runs in a fresh process: their answers are cached."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

# Looked up, not imported: peft imports the `kernels` package, which would shadow test helper
# modules of that name for the rest of the session.
_MISSING = [name for name in ("transformers", "accelerate", "peft") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"not installed: {_MISSING} (the test extra)")

DETECT = textwrap.dedent("""
    import json, tempfile
    import torch
    from accelerate import Accelerator
    from accelerate.utils import is_neuron_available
    from transformers import TrainingArguments
    from transformers.utils import is_torch_neuron_available
    accelerator_device = Accelerator().device
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[])
    print("RESULT", json.dumps({"accelerator": accelerator_device.type, "training_args": args.device.type,
                      "transformers": is_torch_neuron_available(), "accelerate": is_neuron_available()}))
""")

TRAIN = textwrap.dedent("""
    import json, sys, tempfile
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from neuronsim.device import clock

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    def model():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                          bos_token_id=1, eos_token_id=2))

    def train(m, steps=3):
        args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=steps,
                                 per_device_train_batch_size=2, report_to=[], save_strategy="no",
                                 logging_steps=1, disable_tqdm=True)
        before = clock.clock(0).now_ns
        out = Trainer(model=m, args=args, train_dataset=Tokens()).train()
        return {"loss": out.training_loss, "device_ns": clock.clock(0).now_ns - before,
                "devices": sorted({p.device.type for p in m.parameters()})}

    placed = model().to("neuron")
    result = {"user_placed": train(placed), "trainer_placed": train(model())}
    lora = get_peft_model(model(), LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    result["lora"] = train(lora)
    result["lora_trainable"] = sorted({p.device.type for p in lora.parameters() if p.requires_grad})
    print("RESULT", json.dumps(result))
""")


def _run(code: str, neuron_sim: bool) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "NEURON_SIM"}
    if neuron_sim:
        env["NEURON_SIM"] = "1"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    marked = [line for line in res.stdout.splitlines() if line.startswith("RESULT ")]
    return [json.loads(line.removeprefix("RESULT ")) for line in marked]


def test_under_neuron_sim_the_ecosystem_finds_the_device_and_trains_there():
    detected, trained = _run(DETECT + TRAIN, neuron_sim=True)  # one process: the imports cost seconds
    assert detected == {"accelerator": "neuron", "training_args": "neuron", "transformers": True,
                        "accelerate": True}
    for case in ("user_placed", "trainer_placed", "lora"):
        run = trained[case]
        assert run["devices"] == ["neuron"], case  # Trainer moved nothing back to the CPU
        assert run["device_ns"] > 0, case  # the steps ran on the simulated device
        assert 0 < run["loss"] < 10, case
    assert trained["lora_trainable"] == ["neuron"]


def test_without_it_the_cpu():
    assert _run(DETECT, neuron_sim=False) == [{"accelerator": "cpu", "training_args": "cpu",
                                               "transformers": False, "accelerate": False}]
