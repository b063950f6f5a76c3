"""NEURON_SIM=1 runs an unmodified TorchNeuron-style script: no neuronsim import in the script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SCRIPT = textwrap.dedent(
    """
    import torch

    device = torch.device("neuron")
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(8, 4, device=device)
    for _ in range(3):
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.neuron.synchronize()
    fell_back = len(torch.neuron.get_fallback_ops()) > 0
    native = len(torch.neuron.get_executed_ops()) > 0
    print("device", x.device, "loss", round(loss.item(), 6), "native", native, "fallbacks", fell_back)
    """
)


def _run(code_or_path, extra_env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_SIM", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    env.update(extra_env)
    cmd = [sys.executable, str(code_or_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_script_runs_under_neuron_sim(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert "neuronsim" not in SCRIPT
    done = _run(script, {"NEURON_SIM": "1"})
    assert done.returncode == 0, done.stderr
    # every op native, the randn's normal_ included (the device PRNG)
    assert "device neuron:0" in done.stdout and "native True fallbacks False" in done.stdout


def test_autoload_can_be_disabled(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = _run(script, {"NEURON_SIM": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.returncode != 0


def test_example_runs_under_neuron_sim_and_matches_cpu(capsys):
    argv = ("--steps", "2", "--embd", "16", "--block", "8", "--batch", "2", "--layers", "1")
    on_neuron = _run(EXAMPLES / "train_gpt.py", {"NEURON_SIM": "1"}, *argv)
    assert on_neuron.returncode == 0, on_neuron.stderr
    sys.path.insert(0, str(EXAMPLES))
    import train_gpt

    train_gpt.main([*argv, "--device", "cpu"])
    on_cpu = capsys.readouterr().out
    # Same steps printed; losses agree to the native kernels' numerics (they round as the chip does).
    assert _losses(on_neuron.stdout) and len(_losses(on_neuron.stdout)) == len(_losses(on_cpu))
    assert _losses(on_neuron.stdout) == pytest.approx(_losses(on_cpu), rel=1e-5)


def _losses(out: str) -> list[float]:
    return [float(m) for m in re.findall(r"loss ([-0-9.e+]+)", out)]
