"""Tiered execution: run a compile unit's interpreted form until its machine code is ready.

On a cold cache Numba used to make the first Program wait for minutes. The ``tiered`` executor (the
default) never compiles in the caller's thread. Each compile unit — the executor's loop, the
scheduler, one kernel per opcode (``warmup.UNITS``) — is, at its first use in a process:

- loaded from the disk cache if an earlier run (or another process) put it there: milliseconds;
- else handed to a worker process (``compile_worker.py``) that compiles it into the shared cache
  under the cache's compile lock, while the caller runs the unit's interpreted form: its
  instructions on the reference executor (bit for bit what the kernels compute:
  tests/sim/test_executors.py), the scheduler's own Python source (the same float64 operations);
- loaded once the worker says it is ready (at its next use).

Results and cycle counts are the same whichever tier ran. The worker compiles one unit at a time:
the loop and the scheduler first, then the unit whose interpreted form has taken the most time so
far. It starts once the process has spent ``START_AFTER_CPU_S`` of CPU time in interpreted forms
(why: below), or at exit. When the process exits, the worker is handed what is left and finishes it
on its own, at a lower priority, so that the next run finds everything this one used in the cache;
one started at exit begins once the process is gone.
A process that cannot start the worker compiles in place, as the ``numba`` executor always does.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FunctionType

from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher

from neuronsim.sim import _numba_cache

WORKER_LOCK = ".workers.lock"  # held shared by every live worker of a cache directory
# How a worker starts: not at all if its cache directory is gone already (deleted while it was being
# started), checked before anything imports neuronsim.sim, which would make the directory again. One
# started at its caller's exit is given a pipe's read end (argv[3]) whose write end the caller keeps
# until it is gone: it waits for the EOF before it imports anything, so it never takes CPU from the
# caller's own exit (a second or more: interpreter and library teardown) or from processes started
# together with it that are ending too.
_START_WORKER = """import sys
from neuronsim.handoff import lock_is_there, wait_for_exit
lock, path = int(sys.argv[1]), sys.argv[2]
gone = lambda: not lock_is_there(lock, path)
if not gone() and (len(sys.argv) <= 3 or wait_for_exit(int(sys.argv[3]), gone)):
    import runpy
    runpy.run_module("neuronsim.sim.compile_worker", run_name="__main__", alter_sys=True)
"""
_FIRST = ("loop", "branch_loop", "scheduler")  # what makes everything else fast: before any kernel

# The worker starts once the process has spent this much CPU time in interpreted forms, not at the
# first unit it lacks. A short run ends before the worker has compiled anything it uses (train_gpt's
# first step: ~1 s interpreted, against ~100 s of the worker's CPU for the 17 units it uses; the
# scheduler alone ~6 s, a kernel 1-9 s), so a worker started early only took CPU from the run, and
# a lot of it: it runs in a session of its own (it must outlive the caller's terminal), and Linux's
# autogroup scheduler shares a busy machine between sessions, whatever the nice values, so the
# worker got as much CPU as three train_gpt processes together (each took 2.4x one cold process).
# In the caller's session it starved behind busy callers instead, and a long run waited for its
# machine code (a slice of the test suite took 1.7x as long); its own session's weight lowered
# (autogroup nice 19: 15 against 1024) would starve it the same way. So, rent before buying: past
# this threshold the run has paid about what compiling the scheduler or a kernel costs and is likely
# to go on, and the worker starts with a full share; under it, the worker starts at exit and fills
# the cache for the next run.
START_AFTER_CPU_S = 5.0


def load_cached(dispatcher, sig: tuple) -> bool:
    """Load ``dispatcher``'s machine code for ``sig`` if it is in the disk cache; compiles nothing."""
    if sig in dispatcher.overloads:
        return True
    with global_compiler_lock:  # as Dispatcher.compile does when it finds the signature cached
        if sig in dispatcher.overloads:
            return True
        cres = dispatcher._cache.load_overload(sig, dispatcher.targetctx)
        if cres is None:
            return False
        dispatcher._cache_hits[sig] += 1
        if not cres.objectmode:
            dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        dispatcher.add_overload(cres)
    return True


def interpreted(dispatcher) -> Callable:
    """``dispatcher``'s Python source as plain Python; the Numba functions of the same module it
    calls are run as Python too (no compile)."""
    fn = _interpreted.get(dispatcher)
    if fn is None:
        py = dispatcher.py_func
        names = dict(py.__globals__)
        for name, value in py.__globals__.items():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == py.__module__:
                f = value.py_func
                names[name] = FunctionType(f.__code__, names, f.__name__, f.__defaults__, f.__closure__)
        fn = _interpreted[dispatcher] = FunctionType(py.__code__, names, py.__name__, py.__defaults__,
                                                     py.__closure__)
    return fn


_interpreted: dict = {}


# ---------------------------------------------------------------- per-unit state of this process

_PENDING, _READY, _LOADED = "pending", "ready", "loaded"


class _Units:
    """What this process knows of each unit, and its worker."""

    def __init__(self):
        self.lock = threading.Lock()
        self.state: dict[str, str] = {}
        self.seconds: dict[str, float] = {}  # time spent in each pending unit's interpreted form
        self.worker: subprocess.Popen | None = None
        self.worker_failed = False
        self.sent: str | None = None  # the unit the worker is compiling
        self.failed: set[str] = set()  # units the worker could not compile
        self.interpreted_s = 0.0  # CPU seconds in interpreted forms, until the worker starts
        self.caller_end: int | None = None  # a worker started at exit waits for this pipe's EOF

    # -- the worker
    def start_worker(self, at_exit: bool = False) -> bool:
        """Start the worker (``at_exit``: it starts compiling once this process is gone)."""
        if self.worker is not None:
            return True
        if self.worker_failed:
            return False
        root = str(Path(__file__).resolve().parents[2])
        pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=pythonpath)
        cache = _numba_cache.cache_dir()
        try:
            log = open(cache / "background.err", "ab")  # noqa: SIM115 - the worker's stderr
        except OSError:
            log = subprocess.DEVNULL
        # The worker's lock, taken here and inherited: held from before the worker exists until it ends.
        lock_path = cache / WORKER_LOCK
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        # Its answers come through a pipe read with os.read, no file object: closing a file object
        # at exit would wait for the reader thread's read, i.e. for the unit being compiled.
        answers, answer_end = os.pipe()
        argv, fds = [sys.executable, "-c", _START_WORKER, str(lock), str(lock_path)], [lock]
        if at_exit:  # (the write end stays open, not inherited by what this process execs, until it is gone)
            caller, self.caller_end = os.pipe()
            argv.append(str(caller))
            fds.append(caller)
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)
            self.worker = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=answer_end, stderr=log, env=env, start_new_session=True,
                text=True, bufsize=1, pass_fds=fds)
        except OSError:
            os.close(answers)
            self.worker_failed = True
            return False
        finally:
            for fd in (*fds, answer_end):
                os.close(fd)
            if log is not subprocess.DEVNULL:
                log.close()
        threading.Thread(target=self._read, args=(answers,), name="neuronsim-compile-worker",
                         daemon=True).start()
        return True

    def _read(self, answers: int) -> None:
        for line in _lines(answers):
            word, _, unit = line.strip().partition(" ")
            with self.lock:
                if word == "failed":
                    self.failed.add(unit)
                if self.state.get(unit) == _PENDING:
                    self.state[unit] = _READY
                if self.sent == unit:
                    self.sent = None
                self.send_next()
        with self.lock:  # the worker is gone: what is still pending compiles in place
            self.give_up()

    def give_up(self) -> None:
        """No worker (it died, or could not start): pending units compile in place at their next use
        (``lock`` held)."""
        self.worker_failed = True
        for unit, state in self.state.items():
            if state == _PENDING:
                self.failed.add(unit)
                self.state[unit] = _READY

    def start_when_due(self, seconds: float) -> None:
        """Count ``seconds`` of interpreted CPU time; start the worker once they pass the threshold."""
        with self.lock:
            self.interpreted_s += seconds
            if self.worker is None and not self.worker_failed and self.interpreted_s >= START_AFTER_CPU_S:
                if self.start_worker():
                    self.send_next()
                else:
                    self.give_up()

    def send_next(self) -> None:
        """Hand the worker the most wanted pending unit if it is idle (``lock`` held)."""
        if self.sent is not None or self.worker is None or self.worker_failed:
            return
        pending = [u for u, s in self.state.items() if s == _PENDING and u not in self.failed]
        if not pending:
            return
        unit = max(pending, key=lambda u: (u in _FIRST, self.seconds.get(u, 0.0)))
        if self._write(unit + "\n"):
            self.sent = unit

    def _write(self, text: str) -> bool:
        try:
            self.worker.stdin.write(text)
            self.worker.stdin.flush()
            return True
        except (OSError, ValueError):
            self.worker_failed = True
            return False

    def hand_over(self) -> None:
        """At exit: the worker (started now if it was not yet) gets every unit still pending and
        finishes them on its own."""
        with self.lock:
            if self.worker is None and any(s == _PENDING for s in self.state.values()):
                self.start_worker(at_exit=True)
            if self.worker is None or self.worker_failed:
                return
            rest = sorted((u for u, s in self.state.items() if s == _PENDING and u != self.sent),
                          key=lambda u: -self.seconds.get(u, 0.0))
            if rest:
                self._write("".join(u + "\n" for u in rest))
            try:
                self.worker.stdin.close()
            except OSError:
                pass
            self.worker.returncode = 0  # it runs on after this process: no "still running" warning

    def after_fork(self) -> None:
        """A forked child has its own units and starts its own worker (the parent's is not its)."""
        self.__init__()


def _lines(fd: int):
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line.decode() for line in lines)


_units = _Units()
atexit.register(_units.hand_over)
os.register_at_fork(after_in_child=_units.after_fork)


def available(unit: str, load: Callable[[], bool], compile_here: Callable[[], object]) -> bool:
    """Whether ``unit``'s machine code can run now. ``load`` loads it from the disk cache (False if
    it is not there); ``compile_here`` compiles it in this thread, the fallback when the worker
    cannot (it failed to start, died, or reported the unit failed: its error then shows here)."""
    u = _units
    state = u.state.get(unit)
    if state == _LOADED:
        return True
    if state == _PENDING:
        return False
    if load():
        u.state[unit] = _LOADED
        return True
    with u.lock:
        fallback = state == _READY or unit in u.failed or u.worker_failed
        if not fallback:
            u.state[unit] = _PENDING
            u.send_next()  # if the worker has started (``start_when_due``)
            return False
    compile_here()  # the worker's compile is not loadable here (or there is no worker)
    u.state[unit] = _LOADED
    return True


def ran_interpreted(unit: str, seconds: float) -> None:
    """Count CPU time (this thread's) spent in ``unit``'s interpreted form: the worker starts once
    there is enough of it, and compiles the costliest unit first."""
    _units.seconds[unit] = _units.seconds.get(unit, 0.0) + seconds
    if _units.worker is None:
        _units.start_when_due(seconds)


def pending_units() -> frozenset[str]:
    return frozenset(u for u, s in _units.state.items() if s == _PENDING)


def wait_for_workers(cache: Path | None = None) -> None:
    """Block until no worker compiles into ``cache`` (default: this version's cache directory)."""
    path = (cache or _numba_cache.cache_dir()) / WORKER_LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # workers hold it shared while they live
    finally:
        os.close(fd)
