"""``neuronsim run --nproc N``: torchrun with the device enabled; the ranks' exit code is the command's."""

from __future__ import annotations

import subprocess
import sys

from launch import REPO


def _neuronsim(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neuronsim.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_run_nproc_starts_the_ranks_on_the_neuron_backend(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('neuron')\n"
        "t = torch.ones(3, device='neuron') * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "r, n = dist.get_rank(), dist.get_world_size()\n"
        "print(f'rank {r}/{n} {dist.get_backend()} {t.cpu().tolist()} {sys.argv[1:]}')\n"
        "dist.destroy_process_group()\n"
    )
    result = _neuronsim("run", "--nproc", "2", "--numerics", "fast", str(script), "--lr", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(2):
        assert f"rank {rank}/2 neuron [3.0, 3.0, 3.0] ['--lr', '3']" in result.stdout


def test_run_nproc_fails_when_a_rank_fails(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    result = _neuronsim("run", "--nproc", "2", "--numerics", "fast", str(script))
    assert result.returncode != 0
