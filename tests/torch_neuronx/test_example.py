"""examples/nki_ops/nki_op_training.py runs unchanged as a TorchNeuron user would run it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "nki_ops" / "nki_op_training.py"


def test_nki_op_training_example_trains_like_cpu_eager_and_compiled():
    env = dict(os.environ, NEURON_SIM="1")
    res = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[0].startswith("eager") and lines[1].startswith("compiled")
    assert lines[-1] == "NKI kernels run on the device: nki:silu_backward_kernel, nki:silu_kernel"
