"""Run the ``neuronsim`` command in a subprocess, as a user would."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def neuronsim(*args, cwd=None, env=None, timeout=900):
    """``python -m neuronsim.cli.main ARGS`` (the console script's target) with a clean NEURON_SIM."""
    keep = ("NEURON_SIM_CACHE_DIR",)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_SIM") or k in keep}
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "neuronsim.cli.main", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd or REPO, env=full_env, capture_output=True, text=True, timeout=timeout)
