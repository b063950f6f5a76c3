"""The cached-op library's background builder (device/cpp/background.py): started by a process that
did not find the library, it builds only after that process has exited, once per cache directory;
it stops when its cache is deleted; a compile that failed is not retried by every process after it.
A stand-in compiler (a shell script) records when it ran; the real build is tests/device/test_cpp_cache.py's
(through tests/conftest.py) and the slow end-to-end test here."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neuronsim.device.cpp import background, build

FAKE_COMPILER = """#!/bin/sh
# Records "<time> <pid> <parent pid>", waits $FAKE_SLEEP seconds, fails if $FAKE_FAIL, else writes
# the -o file.
echo "$(date +%s.%N) $$ $PPID" >> "$FAKE_LOG"
sleep "${FAKE_SLEEP:-0}"
if [ -n "$FAKE_FAIL" ]; then echo "fake: error: $FAKE_FAIL" >&2; exit 1; fi
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then : > "$2"; fi
  shift
done
"""


@pytest.fixture
def fake(tmp_path):
    compiler = tmp_path / "fake-c++"
    compiler.write_text(FAKE_COMPILER)
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    cache = tmp_path / "cache"
    cache.mkdir()
    log = tmp_path / "compiler.log"
    return build.Toolchain(str(compiler), "/nonexistent/include", "/nonexistent/lib", True, "0"), cache, log


def _caller(tc, cache: Path, log: Path, code: str, **environ) -> subprocess.CompletedProcess:
    """A process on ``cache`` that runs ``code`` with ``tc`` and ``background`` in scope."""
    env = dict(os.environ, NEURON_SIM_CACHE_DIR=str(cache), FAKE_LOG=str(log), **environ)
    prelude = ("import json\nfrom neuronsim.device.cpp import background, build\n"
               f"tc = build.Toolchain(**json.loads({json.dumps(tc.__dict__)!r}))\n")
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _runs(log: Path) -> list[list[float]]:
    return [[float(x) for x in line.split()] for line in log.read_text().splitlines()] if log.exists() else []


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def test_the_builder_compiles_only_after_its_caller_exited_and_once_per_cache(fake, monkeypatch):
    tc, cache, log = fake
    done = _caller(tc, cache, log, """
        import time
        assert background.start(tc)
        assert not background.start(tc)  # one builder per cache directory
        time.sleep(0.5)
        print(time.time())
    """)
    exited = float(done.stdout.split()[-1])
    monkeypatch.setenv("NEURON_SIM_CACHE_DIR", str(cache))
    background.wait_for_builder(cache)
    runs = _runs(log)
    assert len(runs) == 5  # the core library's two sources and link, the cached-op library's unit and link
    assert min(r[0] for r in runs) > exited
    assert build.ops_path(tc).exists() and build.core_path(tc).exists()
    record = json.loads((cache / background.LOG).read_text())
    assert record["status"] == 0
    assert not background.start(tc)  # built: nothing to start


def test_the_builder_stops_with_its_compiler_when_its_cache_is_deleted(fake):
    tc, cache, log = fake
    _caller(tc, cache, log, "assert background.start(tc)", FAKE_SLEEP="60")
    deadline = time.monotonic() + 60
    while not _runs(log) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = {int(pid) for run in _runs(log) for pid in run[1:]}  # compilers and the builder
    shutil.rmtree(cache)
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in pids)


def test_a_failed_build_is_recorded_and_not_started_again(fake, monkeypatch):
    tc, cache, log = fake
    _caller(tc, cache, log, "assert background.start(tc)", FAKE_FAIL="no such header")
    monkeypatch.setenv("NEURON_SIM_CACHE_DIR", str(cache))
    background.wait_for_builder(cache)
    marker = background.failed_marker(build.ops_path(tc))
    assert "no such header" in marker.read_text() and not build.ops_path(tc).exists()
    assert json.loads((cache / background.LOG).read_text())["status"] == 1
    runs = len(_runs(log))
    assert not background.start(tc)
    assert len(_runs(log)) == runs


@pytest.mark.slow
def test_a_process_without_the_library_runs_on_python_and_the_next_one_in_cpp(tmp_path):
    """The real thing: a process on a fresh cache builds the core library only, computes on the Python
    path, and leaves a builder; the next process loads the cached-op library (the core library once)."""
    code = textwrap.dedent("""
        import torch
        from neuronsim.device.native import fast
        a = torch.arange(6.0, device="neuron").reshape(2, 3)
        assert ((a + a).cpu() == torch.arange(6.0).reshape(2, 3) * 2).all()
        maps = [line.split()[-1] for line in open("/proc/self/maps") if "neuron_device-" in line]
        print(fast.active(), len(set(maps)))
    """)
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    # (the reference executor: no Numba compile workers left behind)
    env.update(NEURON_SIM="1", NEURON_SIM_CACHE_DIR=str(tmp_path), NEURON_SIM_EXECUTOR="reference")

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "False 1"
    assert not list(tmp_path.glob("neuron_ops-*.so"))
    background.wait_for_builder(tmp_path)
    assert run() == "True 1"
