"""Numba's disk cache for neuronsim's kernels, keyed by a hash of the simulator's sources.

Numba invalidates a cached function when its own file changes, not when a function it calls
(in another file) does, so an edited engine could keep running stale machine code. Caching every
neuronsim kernel in a directory named after the hash of all of ``neuronsim/sim`` makes any source
change start a fresh cache. Only our own functions are redirected: the directory is set while
neuronsim's modules are decorated, then restored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterator

import numba

from neuronsim import env

_SIM_DIR = Path(__file__).parent


def sources_hash() -> str:
    """What the cache is keyed by: Numba's version and every source file of ``neuronsim/sim``."""
    h = hashlib.sha256(numba.__version__.encode())
    for path in sorted(_SIM_DIR.rglob("*.py")):
        h.update(str(path.relative_to(_SIM_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    root = os.environ.get(env.NEURON_SIM_CACHE_DIR)
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "neuronsim" / "numba"


def cache_dir() -> Path:
    """The directory this version of the simulator caches its machine code in."""
    return cache_root() / sources_hash()


def _prepare_dir() -> Path:
    root = cache_root()
    target = cache_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
        for old in root.iterdir():  # older source versions will never be used again
            if old.is_dir() and old != target:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass  # read-only home: numba falls back to no caching for unwritable dirs
    return target


@contextlib.contextmanager
def neuronsim_cache_dir() -> Iterator[None]:
    saved = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(_prepare_dir())
    try:
        yield
    finally:
        numba.config.CACHE_DIR = saved
