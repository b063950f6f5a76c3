"""`import nki` resolves to neuronsim.nki (NEURON_SIM=1, no real nki), so kernel files run unchanged."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import neuronsim

KERNEL_FILE = textwrap.dedent("""
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out, src=x)
        return out

    a = np.ones((128, 16), np.float32)
    print("sum", nki.simulate(add_kernel)(a, a).sum(), "from", nki.__name__)
""")


def _run(tmp_path, args, env_extra, kernel=KERNEL_FILE):
    path = tmp_path / "my_kernel.py"
    path.write_text(kernel)
    # Only the checkout under test on the path: a user's PYTHONPATH must not decide what `nki` is.
    env = {**os.environ, "PYTHONPATH": str(Path(neuronsim.__file__).parents[1]), **env_extra}
    return subprocess.run(
        [sys.executable, *args, str(path)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=600
    )


def test_python_m_neuronsim_nki_runs_a_kernel_file_unchanged(tmp_path):
    res = _run(tmp_path, ["-m", "neuronsim.nki"], {"NEURON_SIM": "1"})
    assert res.returncode == 0, res.stderr
    assert "sum 4096.0 from neuronsim.nki" in res.stdout


@pytest.mark.parametrize("how", ["import torch", "neuronsim run"])
def test_torch_autoload_and_neuronsim_run_alias_nki(tmp_path, how):
    kernel = KERNEL_FILE
    if how == "import torch":
        kernel, args = "import torch\n" + kernel, []
    else:
        args = ["-m", "neuronsim.cli.main", "run"]
    res = _run(tmp_path, args, {"NEURON_SIM": "1"}, kernel=kernel)
    assert res.returncode == 0, res.stderr
    assert "sum 4096.0 from neuronsim.nki" in res.stdout


def test_without_the_alias_import_nki_fails(tmp_path):
    res = _run(tmp_path, [], {"NEURON_SIM": "1"})
    assert res.returncode != 0 and "No module named 'nki'" in res.stderr


def test_install_alias_respects_neuron_sim_and_a_real_nki(tmp_path):
    code = textwrap.dedent("""
        import sys
        from neuronsim.nki_alias import install_alias
        installed = install_alias()
        loaded = "neuronsim.nki.trace" in sys.modules  # the alias is lazy: nothing loaded yet
        try:
            import nki
            import nki.isa
            name = nki.__name__ + ("" if nki.isa.__name__ == "neuronsim.nki.isa" else "?")
        except ImportError:
            name = False
        print(installed, loaded, name)
    """)
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, NEURON_SIM="0"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.stdout.split() == ["False", "False", "False"]
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, NEURON_SIM="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.stdout.split() == ["True", "False", "neuronsim.nki"]
    fake = tmp_path / "site" / "nki"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    env = dict(os.environ, NEURON_SIM="1", PYTHONPATH=str(tmp_path / "site"))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert res.stdout.split()[0] == "False" and "neuronsim" not in res.stdout  # a real nki is never shadowed


@pytest.mark.parametrize("module", ["neuronsim.nki"])
def test_the_frontend_imports_neither_torch_nor_the_device(module):
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'neuronsim.device'))]\n"
        "print(bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
