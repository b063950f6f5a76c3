"""The example-style training scripts of ``examples/``, each run as a user runs it, on the CPU and on
``neuron``: the losses must agree, and the ``neuron`` run reports its host fallbacks and the share of
its simulated device time spent in native kernels.

Each script has ``main(argv) -> losses`` (and the same command line as a user's
``NEURON_SIM=1 python examples/<script>.py``). Scripts with dropout compare with it off (the device's
dropout masks come from its own PRNG); the share is measured on the comparison's device run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from neuronsim.env import NEURON_SIM
from neuronsim.sweep.device_time import DeviceTime

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT_S = 1800  # one script's neuron run
_MARK = "NEURONSIM_SWEEP_RESULT "


@dataclass(frozen=True)
class Script:
    name: str  # examples/<name>.py
    args: tuple[str, ...] = ()  # the comparison's arguments (small, deterministic)
    rtol: float = 2e-3
    needs: tuple[str, ...] = ()  # packages it imports (the test extra)


SCRIPTS = (
    Script("word_language_model", ("--steps", "8", "--dropout", "0")),
    Script("forward_forward", ("--epochs", "6", "--samples", "128")),
    Script("nanogpt", ("--max-iters", "6")),
    Script("train_gpt", ("--steps", "6", "--batch", "4", "--block", "16")),
    Script("lora_finetune", ("--steps", "6"), needs=("peft", "transformers")),
    Script("hf_trainer", ("--steps", "6"), needs=("transformers", "accelerate")),
    # helper "vision"'s examples, when they are in the checkout
    Script("cnn_classifier", ("--steps", "4", "--batch", "16", "--dropout", "0")),
    Script("vae", ("--steps", "4", "--batch", "32", "--cpu-rng")),  # (the noise drawn on the CPU)
    Script("dcgan", ("--steps", "3", "--batch", "16", "--ngf", "16", "--ndf", "16", "--cpu-rng")),
)
BY_NAME = {s.name: s for s in SCRIPTS}


@dataclass
class ScriptRun:
    script: str
    status: str = "pass"  # pass | fail | error | skip
    detail: str = ""
    seconds: float = 0.0
    cpu: list[float] = field(default_factory=list)
    neuron: list[float] = field(default_factory=list)
    device: DeviceTime = field(default_factory=DeviceTime)

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def _load(name: str):
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"neuronsim_sweep_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def missing(script: Script) -> str | None:
    """Why the script cannot run here (None: it can)."""
    if not (EXAMPLES / f"{script.name}.py").exists():
        return f"examples/{script.name}.py is not in this checkout"
    absent = [p for p in script.needs if importlib.util.find_spec(p) is None]
    return f"needs {', '.join(absent)} (the test extra)" if absent else None


def run_script(script: Script) -> ScriptRun:
    """The script on the CPU (in this process) and on ``neuron`` (in a fresh ``NEURON_SIM=1`` process,
    as a user runs it: the ecosystem's own Neuron detection sees the device there); never raises."""
    result = ScriptRun(script.name)
    why = missing(script)
    if why:
        result.status, result.detail = "skip", why
        return result
    start = time.perf_counter()
    try:
        result.cpu = list(_load(script.name).main([*script.args, "--device", "cpu", "--quiet"]))
        _on_neuron(script, result)
        _compare(script, result)
    except Exception as exc:  # noqa: BLE001  (a script's failure is a row of the table)
        result.status, result.detail = "error", f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    result.seconds = time.perf_counter() - start
    return result


def _on_neuron(script: Script, result: ScriptRun) -> None:
    env = {**os.environ, NEURON_SIM: "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(EXAMPLES.parent), os.environ.get("PYTHONPATH")) if p)}
    code = "from neuronsim.sweep.scripts import worker; worker()"
    proc = subprocess.run([sys.executable, "-c", code, script.name, *script.args], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
    if proc.returncode or not found:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the neuron run exited {proc.returncode}: {tail}")
    doc = json.loads(found[-1][len(_MARK):])
    result.neuron = doc["losses"]
    result.device.native_ns, result.device.fallback_ns = doc["native_ns"], doc["fallback_ns"]
    result.device.fallbacks, result.device.executed = doc["fallbacks"], doc["executed"]


def _compare(script: Script, result: ScriptRun) -> None:
    if result.device.share is None:
        result.status, result.detail = "fail", "no simulated device time: the script did not run on neuron"
    elif len(result.cpu) != len(result.neuron):
        result.status = "fail"
        result.detail = f"{len(result.neuron)} losses on neuron, {len(result.cpu)} on the CPU"
    else:
        try:
            torch.testing.assert_close(torch.tensor(result.neuron), torch.tensor(result.cpu),
                                       rtol=script.rtol, atol=1e-5)
        except AssertionError as exc:
            result.status, result.detail = "fail", " ".join(str(exc).split())[:300]


def worker() -> None:
    """The neuron half, in its own process: ``<script> <args...>`` from argv; prints one JSON line."""
    name, args = sys.argv[1], sys.argv[2:]
    with DeviceTime() as measured:
        losses = list(_load(name).main([*args, "--device", "neuron", "--quiet"]))
    print(_MARK + json.dumps({"losses": losses, "native_ns": measured.native_ns,
                              "fallback_ns": measured.fallback_ns, "fallbacks": measured.fallbacks,
                              "executed": measured.executed}), flush=True)


def fallback_list(r: ScriptRun) -> str:
    ops = sorted(r.device.fallbacks.items())
    return ", ".join(f"{n.removeprefix('aten::')} x{c}" for n, c in ops) or "none"


def share_text(r: ScriptRun) -> str:
    return "—" if r.device.share is None else f"{100 * r.device.share:.1f}%"


def line(r: ScriptRun) -> str:
    status = "pass" if r.passed else r.status.upper()
    detail = f"  {r.detail}" if r.detail else ""
    return (f"{r.script:20s} {status:5s} {r.seconds:6.1f}s native {share_text(r):>6s}  "
            f"fallbacks: {fallback_list(r)}{detail}")
