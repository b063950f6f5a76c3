"""Build the cached-op library after this process exits, for the processes after it:
``python -m neuronsim.device.cpp.background LOCK_FD LOCK_PATH CALLER_FD TOOLCHAIN``.

A process that does not find the cached-op library (``build.py``) runs without it — the Python path
computes every call the same — and at exit starts this builder, which waits until that process has
exited (it holds a pipe's read end, the process the write end: EOF comes when the process is gone,
after its own exit work, which so never competes with the compile), then builds the library. It runs
at a lower priority, in the caller's session (terminal signals aside: a process group of its own), so
that on a busy machine the caller's session's other processes — the other ranks of a torchrun, still
running — come first.

One builder per cache directory: the exiting process takes ``BUILDER_LOCK`` without waiting (if
another holds it, a builder is on its way already) and hands it over, inherited, so the lock is held
from before the builder exists until it ends (``wait_for_builder``). When the directory is deleted (a
test's or benchmark's temporary cache) the builder stops at once, its compiler killed. A compile that
fails leaves ``<library>.failed`` with the compiler's output, and no process starts a builder for that
library again (``neuronsim warmup`` reports the error).
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

from neuronsim.handoff import lock_is_there, wait_for_exit

BUILDER_LOCK = "neuron_ops.builder.lock"
LOG = "neuron_ops.log"  # a line per builder that ended: its CPU seconds (its compiler's included)
PRIORITY = 10  # nice: the processes still running come first

_scheduled = threading.Lock()
_caller_end: int | None = None  # the pipe's write end: open until this process is gone


def failed_marker(target: Path) -> Path:
    return target.with_name(target.name + ".failed")


def schedule(tc) -> None:
    """Start a builder of ``tc``'s cached-op library when this process exits (once per process)."""
    if _scheduled.acquire(blocking=False):
        atexit.register(start, tc)


def start(tc) -> bool:
    """Start a builder now, if none is on its way; it builds once this process has exited. True if
    this process started it."""
    global _caller_end
    from neuronsim.device.cpp import build

    target = build.ops_path(tc)
    if target.exists() or failed_marker(target).exists():
        return False
    lock_path = target.parent / BUILDER_LOCK
    try:
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a builder is on its way
        caller, caller_end = os.pipe()  # (not inherited by what this process execs: only the builder waits)
        root = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        environ = dict(os.environ, PYTHONPATH=path)
        try:
            with open(target.parent / "neuron_ops.err", "ab") as err:
                subprocess.Popen(
                    [sys.executable, "-m", "neuronsim.device.cpp.background", str(lock), str(lock_path),
                     str(caller), json.dumps(dataclasses.asdict(tc))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=environ,
                    process_group=0, pass_fds=(lock, caller)).returncode = 0  # (not waited for)
        except OSError:
            os.close(caller_end)
            return False
        finally:
            os.close(caller)
        _caller_end = caller_end
        return True
    finally:
        os.close(lock)


def wait_for_builder(cache: Path) -> None:
    """Block until no builder works for ``cache`` (a cache directory)."""
    try:
        fd = os.open(cache / BUILDER_LOCK, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    lock, lock_path, caller, spec = int(argv[0]), argv[1], int(argv[2]), argv[3]
    try:
        os.nice(PRIORITY)
    except OSError:
        pass

    def gone() -> bool:
        return not lock_is_there(lock, lock_path)

    if not wait_for_exit(caller, gone):
        return 0
    from neuronsim.device.cpp import build
    from neuronsim.errors import NativeBuildError

    tc = build.Toolchain(**json.loads(spec))
    status = 0
    try:
        build.build_ops(tc, stop=gone)
    except build.Stopped:
        return 0
    except NativeBuildError as exc:
        status = 1
        try:
            failed_marker(build.ops_path(tc)).write_text(str(exc) + "\n")
        except OSError:
            pass
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"pid": os.getpid(), "cpu_s": sum(u.ru_utime + u.ru_stime for u in usage), "status": status}
    try:
        with open(Path(lock_path).with_name(LOG), "a") as log:
            log.write(json.dumps(record) + "\n")
    except OSError:
        pass
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
