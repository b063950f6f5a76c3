"""Numba's disk cache for neuronsim's kernels, keyed by a hash of the simulator's sources.

Numba invalidates a cached function when its own file changes, not when a function it calls
(in another file) does, so an edited engine could keep running stale machine code. Caching every
neuronsim kernel in a directory named after the hash of all of ``neuronsim/sim`` makes any source
change start a fresh cache. Only our own functions are redirected: the directory is set while
neuronsim's modules are decorated, then restored.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numba
from numba.core.compiler_lock import global_compiler_lock

from neuronsim import env

_SIM_DIR = Path(__file__).parent


@functools.cache
def sources_hash() -> str:
    """What the cache is keyed by: Numba's version and every source file of ``neuronsim/sim``, as
    this process first read them (a checkout that changes under a running process must not move
    its cache directory: its workers' locks and logs are in the one it imported with)."""
    h = hashlib.sha256(numba.__version__.encode())
    for path in sorted(_SIM_DIR.rglob("*.py")):
        h.update(str(path.relative_to(_SIM_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    root = os.environ.get(env.NEURON_SIM_CACHE_DIR)
    if root:
        return Path(root)
    return Path(os.environ.get(env.XDG_CACHE_HOME, Path.home() / ".cache")) / "neuronsim" / "numba"


def cache_dir() -> Path:
    """The directory this version of the simulator caches its machine code in."""
    return cache_root() / sources_hash()


# Other versions' directories under the same root are deleted only when no process uses them
# (each process holds ``_IN_USE`` shared while it lives) and they are not among the
# ``KEEP_VERSIONS`` most recently used: two checkouts sharing a root (a branch and main, two
# worktrees) keep each other's caches, and edits to the simulator do not pile up versions.
_IN_USE = ".in_use"
KEEP_VERSIONS = 4
_VERSION_NAME = re.compile(r"[0-9a-f]{16}")  # sources_hash(): nothing else in the root is touched
_in_use_fd: int | None = None  # this process's shared hold on its directory's _IN_USE


def _hold_in_use(target: Path) -> None:
    """Hold ``target``'s in-use lock shared for the life of the process (and touch it: last used)."""
    global _in_use_fd
    for _ in range(8):  # another process may be deleting the directory right now: make it again
        target.mkdir(parents=True, exist_ok=True)
        fd = os.open(target / _IN_USE, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.fstat(fd).st_ino == os.stat(target / _IN_USE).st_ino:  # not deleted meanwhile
                os.utime(fd)
                os.set_inheritable(fd, False)
                _in_use_fd = fd
                return
        except FileNotFoundError:
            pass
        os.close(fd)


def _last_used(version: Path) -> float:
    try:
        return (version / _IN_USE).stat().st_mtime
    except OSError:
        return 0.0


def _delete_unused_versions(root: Path, target: Path) -> None:
    others = sorted((d for d in root.iterdir()
                     if d != target and _VERSION_NAME.fullmatch(d.name) and d.is_dir()),
                    key=_last_used, reverse=True)
    for old in others[KEEP_VERSIONS - 1:]:
        try:
            fd = os.open(old / _IN_USE, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while any process uses it
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(old, ignore_errors=True)
        finally:
            os.close(fd)


def _prepare_dir() -> Path:
    root = cache_root()
    target = cache_dir()
    try:
        _hold_in_use(target)
        _delete_unused_versions(root, target)
    except OSError:
        pass  # read-only home: numba falls back to no caching for unwritable dirs
    return target


@contextlib.contextmanager
def neuronsim_cache_dir() -> Iterator[None]:
    global _active_dir
    saved = numba.config.CACHE_DIR
    _active_dir = _prepare_dir()
    numba.config.CACHE_DIR = str(_active_dir)
    try:
        yield
    finally:
        numba.config.CACHE_DIR = saved


# ---------------------------------------------------------------- one compile per cache directory
#
# Processes sharing a cache directory (torchrun ranks, parallel CI jobs) compile one at a time: a
# compile holds an exclusive lock on ``.compile.lock`` in the directory, and a process that finds
# it held waits, then finds the machine code in the cache and loads it instead of compiling it
# again. Numba publishes each cache file atomically (written aside, then renamed), so a reader
# never sees half a file. Every dispatcher of ``neuronsim/sim`` is guarded (``guard_compiles``):
# its ``compile`` (first call of a signature, or a caller's typing that needs it) takes the lock
# unless this thread already holds it (nested compiles) or the signature is compiled already.

_LOCK_NAME = ".compile.lock"
_held = threading.local()  # depth of guarded compiles on this thread
_process_lock = threading.RLock()  # threads of one process take turns (Numba compiles one at a time anyway)
_active_dir: Path | None = None  # where this process's dispatchers cache (set by neuronsim_cache_dir)


def _lock_path() -> Path | None:
    return None if _active_dir is None else _active_dir / _LOCK_NAME


@contextlib.contextmanager
def compile_lock(label: str) -> Iterator[None]:
    """Hold the cache directory's compile lock (reentrant on this thread) while compiling ``label``;
    a progress line on a terminal if it takes more than a moment."""
    depth = getattr(_held, "depth", 0)
    if depth:
        _held.depth = depth + 1
        try:
            yield
        finally:
            _held.depth = depth
        return
    with global_compiler_lock, _process_lock, _Progress(label) as progress:
        fd = _open_lock_file()
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    progress.waiting = True
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    progress.waiting = False
            _held.depth = 1
            try:
                yield
            finally:
                _held.depth = 0
        finally:
            if fd is not None:
                os.close(fd)  # closing releases the lock


def _open_lock_file() -> int | None:
    path = _lock_path()
    if path is None:
        return None
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None  # an unwritable cache: numba does not cache there either


def dispatchers_of(modules) -> list:
    """The Numba dispatchers defined in ``modules``."""
    found: dict[int, object] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, numba.core.registry.CPUDispatcher) and value.__module__ == module.__name__:
                found[id(value)] = value
    return list(found.values())


def guard_compiles(dispatchers, labels: dict[int, str] | None = None) -> None:
    """Make each dispatcher's compiles take the cache directory's lock; ``labels`` (by ``id``) name
    what the progress line shows, else the function's name."""
    for dispatcher in dispatchers:
        label = (labels or {}).get(id(dispatcher), dispatcher.py_func.__name__)
        if getattr(dispatcher, "_neuronsim_guarded", False):
            continue
        compile_unguarded = dispatcher.compile

        def compile(sig, _compile=compile_unguarded, _dispatcher=dispatcher, _label=label):
            if getattr(_held, "depth", 0) or (isinstance(sig, tuple) and sig in _dispatcher.overloads):
                return _compile(sig)
            with compile_lock(_label):
                return _compile(sig)

        dispatcher.compile = compile
        dispatcher._neuronsim_guarded = True


class _Progress:
    """A line on stderr, when it is a terminal, while a compile (or the wait for another process's)
    lasts longer than ``_QUIET_SECONDS``; erased when it ends. Loads from the cache take
    milliseconds, so they never show."""

    _QUIET_SECONDS = 1.0

    def __init__(self, label: str):
        self.label = label
        self.waiting = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def __enter__(self) -> _Progress:
        stream = sys.stderr
        if stream is not None and hasattr(stream, "isatty") and stream.isatty():
            self._start = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="neuronsim-compile-progress", daemon=True)
            self._thread.start()
        return self

    def _line(self) -> str:
        seconds = time.monotonic() - self._start
        if self.waiting:
            what = "waiting for another process compiling into the same cache"
        else:
            what = f"compiling the simulator's machine code ({self.label}); cached for later runs"
        return f"neuronsim: {what} ... {seconds:.0f} s"

    def _run(self) -> None:
        if self._done.wait(self._QUIET_SECONDS):
            return
        while True:
            self._write("\r\x1b[K" + self._line())
            self._shown = True
            if self._done.wait(1.0):
                return

    def _write(self, text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._done.set()
        self._thread.join()
        if self._shown:
            self._write("\r\x1b[K")
