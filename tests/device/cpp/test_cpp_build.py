"""The device's C++ library: built once with the system compiler, cached, safe for concurrent
processes, and a clear neuronsim error (never a crash) when it cannot be built."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from neuronsim.device.cpp import build
from neuronsim.errors import NativeBuildError


def _env(cache_dir, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_SIM", "CXX")}
    env["NEURON_SIM_CACHE_DIR"] = str(cache_dir)
    env.update(extra)
    return env


def test_a_missing_compiler_named_by_cxx_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/bin/g++")
    with pytest.raises(NativeBuildError, match=r"CXX='/nonexistent/bin/g\+\+' is not an executable"):
        build.find_compiler()


def test_no_compiler_on_path_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NativeBuildError, match=r"no C\+\+ compiler found .* `apt-get install g\+\+`"):
        build.find_compiler()


def test_a_failed_compile_reports_the_compiler_and_leaves_nothing_behind(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURON_SIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    with pytest.raises(NativeBuildError, match="exit status 1"):
        build.build()
    assert [p.name for p in tmp_path.iterdir()] == ["neuron_device.lock"]


def test_import_torch_without_a_compiler_fails_with_the_neuronsim_error(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True,
                          timeout=300, env=_env(tmp_path, NEURON_SIM="1", CXX="/nonexistent/c++"))
    assert done.returncode == 1  # an exception, not a signal
    assert "NativeBuildError" in done.stderr and "Point CXX at a C++ compiler" in done.stderr


def test_processes_starting_together_build_one_library(tmp_path):
    code = "from neuronsim.device.cpp import build; print(build.build())"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(tmp_path)) for _ in range(2)]
    outputs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    built = sorted(p.name for p in tmp_path.iterdir())
    assert built == sorted([os.path.basename(paths.pop()), "neuron_device.lock"])  # no partial files


def test_the_cached_library_is_reused(tmp_path):
    code = textwrap.dedent("""
        import os, torch
        from neuronsim.device.cpp import build
        path = build.build()
        stamp = os.stat(path).st_mtime_ns
        assert build.build() == path and os.stat(path).st_mtime_ns == stamp
        print(path.name)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                          env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("neuron_device-torch")
