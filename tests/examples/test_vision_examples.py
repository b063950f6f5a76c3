"""The vision examples (examples/cnn_classifier.py, vae.py, dcgan.py), written as PyTorch's MNIST,
VAE and DCGAN examples are, run small on ``neuron`` and on the CPU: the same losses (dropout off, and
``--cpu-rng`` so both draw the same weights and noise), every op of their training steps native,
and the device's own RNG (``torch.manual_seed``) repeating a run."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from neuronsim.device import clock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = {
    "cnn_classifier": ["--steps", "3", "--batch", "8", "--width", "4", "--image", "12", "--dropout", "0"],
    "vae": ["--steps", "3", "--batch", "8", "--side", "10", "--hidden", "24", "--latent", "4", "--cpu-rng"],
    "dcgan": ["--steps", "2", "--batch", "4", "--nz", "8", "--ngf", "4", "--ndf", "4", "--cpu-rng"],
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_share(run) -> tuple[float, dict[str, int]]:
    """``run()`` on the device: the native kernels' share of its simulated device time (the script's
    own host copies left out) and the ops that fell back, with their calls."""
    for c in clock.all_clocks().values():
        c.reset()
    torch.neuron.clear_op_tracking()
    run()
    native = fallback = 0.0
    for c in clock.all_clocks().values():
        for e in c.events():
            if e.kind in ("h2d", "d2h"):
                continue
            if e.native:
                native += e.duration_ns
            else:
                fallback += e.duration_ns
    return native / (native + fallback), torch.neuron.get_op_counts()["fallback"]


@pytest.mark.parametrize("name", [
    pytest.param("cnn_classifier", marks=pytest.mark.slow),  # ~6 s: DCGAN covers its kernels in CI
    "vae",
    "dcgan",
])
def test_example_matches_cpu_and_runs_natively(name):
    main = _load(name).main
    want = main([*SMALL[name], "--device", "cpu", "--quiet"])
    got = []
    share, fallbacks = native_share(lambda: got.extend(main([*SMALL[name], "--device", "neuron", "--quiet"])))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=2e-3, atol=1e-5)
    assert all(math.isfinite(v) for v in torch.tensor(got).flatten().tolist())
    assert not fallbacks, fallbacks  # BatchNorm's int64 ``num_batches_tracked += 1`` included
    assert share >= 0.95, share


@pytest.mark.slow  # ~5 s
def test_device_rng_runs_repeat_with_the_seed_and_differ_from_the_cpu_stream():
    """Without ``--cpu-rng`` the DCGAN's init and noise come from the device PRNG (native normal_)."""
    main = _load("dcgan").main
    args = [a for a in SMALL["dcgan"] if a != "--cpu-rng"] + ["--device", "neuron", "--quiet", "--steps", "1"]
    first = main(args)
    assert "aten::normal_" in torch.neuron.get_executed_ops()
    assert main(args) == first
    assert main([*args, "--seed", "5"]) != first
