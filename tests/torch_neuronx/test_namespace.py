"""``import torch_neuronx`` under NEURON_SIM=1 gives TorchNeuron's namespace — only when no real
``torch_neuronx`` is installed (the rule the ``nki`` alias follows: DESIGN.md decision 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
import torch_neuronx

import neuronsim.torch_neuronx


def test_import_resolves_to_neuronsim_and_mirrors_torch_neuron():
    assert torch_neuronx is neuronsim.torch_neuronx
    for name in torch_neuronx._MIRRORED:
        assert getattr(torch_neuronx, name) is getattr(torch.neuron, name), name
    for name in ("nki_op", "wrap_nki", "get_fallback_ops", "get_executed_ops", "clear_op_tracking",
                 "NeuronProfiler", "is_neuron_runtime_initialized", "Stream", "Event", "synchronize"):
        assert callable(getattr(torch_neuronx, name)), name
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

    assert NeuronProfiler is torch_neuronx.NeuronProfiler and ProfileMode.DEVICE in NeuronConfig().modes


def test_op_tracking_sees_native_and_fallback_ops():
    torch_neuronx.clear_op_tracking()
    x = torch.ones(4, 4, device="neuron")
    (x + x).cpu()
    torch.linalg.qr(x)  # no kernel: the host computes it
    assert "aten::add.Tensor" in torch_neuronx.get_executed_ops()
    assert any("linalg_qr" in op for op in torch_neuronx.get_fallback_ops())
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == [] and torch_neuronx.get_fallback_ops() == []


PROBE = textwrap.dedent("""
    import importlib.util, torch
    spec = importlib.util.find_spec("torch_neuronx")
    try:
        import torch_neuronx
        print("imported", torch_neuronx.__name__)
    except ImportError:
        print("missing", spec)
""")


def _probe(env_extra: dict, pythonpath: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NEURON_SIM"}
    env.update(env_extra)
    if pythonpath:  # first on the path: a "real" package installed beside neuronsim
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")]))
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_alias_only_under_neuron_sim_and_never_over_a_real_install(tmp_path):
    assert _probe({"NEURON_SIM": "1"}) == "imported neuronsim.torch_neuronx"
    assert _probe({}) == "missing None"
    (tmp_path / "folders" / "torch_neuronx").mkdir(parents=True)  # a folder of that name is no install
    assert _probe({"NEURON_SIM": "1"}, str(tmp_path / "folders")) == "imported neuronsim.torch_neuronx"
    real = tmp_path / "site" / "torch_neuronx"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("")
    assert _probe({"NEURON_SIM": "1"}, str(tmp_path / "site")) == "imported torch_neuronx"
