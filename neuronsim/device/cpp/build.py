"""Build the device's two C++ libraries with the system C++ compiler, once per torch version and
source, cached.

- The core library (``neuron_device.cpp``, ``neuron_memory.cpp``): the device guard, ``set_data``,
  fresh device tensors and the HBM ledger. Registration needs it before anything else, so a cold
  first run waits for it: its sources include c10's and TensorBase's headers only (~2 s of g++ each,
  side by side).
- The cached-op library (``neuron_keys.cpp``, ``neuron_host.cpp``, ``neuron_ops.cpp``, compiled as
  one translation unit: each includes ATen's dispatcher, ~4 s of g++ to parse), linked against the
  core library. It only makes repeat calls faster (the Python path computes the same), so a process
  that does not find it runs without it and has it built after it exits (``background.py``), for
  the processes after it; :func:`build_ops` builds it now (``neuronsim warmup``, the test suite).

Each is compiled against the installed torch's own headers (its wheel ships them) and links its
libc10/libtorch_cpu(/libtorch_python), so it always matches the torch in use. A library's cache key
is the torch version, the C++ ABI flag, the compiler and its sources' hash (the cached-op library's:
all sources, as it links the core); a library is written under a temporary name and renamed into
place while holding a file lock, so processes starting together (torchrun's ranks on a fresh
machine) build it once and never load a half-written file.

The cache is the neuronsim cache directory (``NEURON_SIM_CACHE_DIR``, else ``~/.cache/neuronsim``).
The libraries are plain files in it: the Numba cache keeps its own subdirectories there.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from neuronsim import env
from neuronsim.errors import NativeBuildError


def _here(*names: str) -> tuple[Path, ...]:
    return tuple(Path(__file__).with_name(name) for name in names)


CORE_SOURCES = _here("neuron_device.cpp", "neuron_memory.cpp")
CORE_HEADERS = _here("neuron_memory.h")
OPS_SOURCES = _here("neuron_keys.cpp", "neuron_host.cpp", "neuron_ops.cpp")
OPS_HEADERS = _here("neuron_keys.h", "neuron_host.h")
CORE_LOCK = "neuron_device.lock"
OPS_LOCK = "neuron_ops.lock"
COMPILE_TIMEOUT_S = 600  # a cold compile takes a few seconds; a loaded CI machine, much longer
_COMPILERS = ("g++", "c++", "clang++")
_POLL_S = 0.25  # how often a build checks its ``stop``


class Stopped(Exception):
    """A build given up because its ``stop`` said so (``background.py``: the cache was deleted)."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """What a library is built with and for: the compiler and the installed torch (its headers,
    libraries, C++ ABI flag and version). Plain strings, so a process without torch imported can
    build (``background.py``)."""

    compiler: str
    include: str
    lib: str
    abi: bool
    torch_version: str


def cache_dir() -> Path:
    root = os.environ.get(env.NEURON_SIM_CACHE_DIR)
    if root:
        return Path(root)
    return Path(os.environ.get(env.XDG_CACHE_HOME) or Path.home() / ".cache") / "neuronsim"


def find_compiler() -> str:
    """``$CXX`` if set, else the first of g++, c++, clang++ on PATH."""
    chosen = os.environ.get(env.CXX)
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise NativeBuildError(
                f"CXX={chosen!r} is not an executable C++ compiler. {_why()} Point CXX at a C++ "
                "compiler (g++ or clang++), or unset it to use the one on PATH."
            )
        return found
    for name in _COMPILERS:
        found = shutil.which(name)
        if found is not None:
            return found
    raise NativeBuildError(
        f"no C++ compiler found (looked for $CXX, {', '.join(_COMPILERS)} on PATH). {_why()} "
        "Install one (e.g. `apt-get install g++`) or set CXX."
    )


def _why() -> str:
    return (
        "The neuron device needs its small C++ support library (a multi-device guard and "
        "Tensor.set_data across cpu and neuron, fresh device memory and the HBM ledger), compiled "
        f"once per torch version from {_names(CORE_SOURCES)} against torch's headers and cached in "
        f"{cache_dir()}."
    )


def toolchain() -> Toolchain:
    """The compiler in use and the installed torch (imports torch)."""
    import torch

    root = Path(torch.__file__).parent
    return Toolchain(find_compiler(), str(root / "include"), str(root / "lib"),
                     bool(torch._C._GLIBCXX_USE_CXX11_ABI), torch.__version__)


def _path(tc: Toolchain, stem: str, files: tuple[Path, ...]) -> Path:
    h = hashlib.sha256()
    for source in files:
        h.update(source.read_bytes())
    for part in (tc.torch_version, str(tc.abi), tc.compiler, tc.include):
        h.update(b"\0" + part.encode())
    return cache_dir() / f"{stem}-torch{tc.torch_version}-{h.hexdigest()[:16]}.so"


def core_path(tc: Toolchain) -> Path:
    return _path(tc, "neuron_device", CORE_SOURCES + CORE_HEADERS)


def ops_path(tc: Toolchain) -> Path:
    return _path(tc, "neuron_ops", CORE_SOURCES + CORE_HEADERS + OPS_SOURCES + OPS_HEADERS)


def build(tc: Toolchain | None = None, stop: Callable[[], bool] | None = None) -> Path:
    """The core library's path, compiling it first if no process has yet."""
    tc = tc or toolchain()
    return _built(core_path(tc), CORE_LOCK, lambda target: _compile_core(tc, target, stop))


def build_ops(tc: Toolchain | None = None, stop: Callable[[], bool] | None = None) -> Path:
    """The cached-op library's path, compiling it (and the core library it links) first if no
    process has yet."""
    tc = tc or toolchain()
    core = build(tc, stop)
    return _built(ops_path(tc), OPS_LOCK, lambda target: _compile_ops(tc, core, target, stop))


def _built(target: Path, lock_name: str, compile_into: Callable[[Path], None]) -> Path:
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not target.exists():
            compile_into(target)
    return target


def _flags(tc: Toolchain) -> list[str]:
    return ["-O2", "-std=c++20", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(tc.abi)}", "-I", tc.include]


def _compile_core(tc: Toolchain, target: Path, stop) -> None:
    """Each source into an object file side by side (on a loaded machine g++ takes a minute per
    source: side by side the wall is the slowest one's), then one link. The library's soname is its
    file name: the cached-op library names it so, and finds it loaded already."""
    def commands(objects: str, partial: str) -> list[list[str]]:
        compiles = [[tc.compiler, *_flags(tc), "-c", str(source), "-o",
                     os.path.join(objects, source.stem + ".o")] for source in CORE_SOURCES]
        link = [tc.compiler, "-shared", "-fPIC", f"-Wl,-soname,{target.name}", *(c[-1] for c in compiles),
                "-o", partial, "-L", tc.lib, "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{tc.lib}"]
        return [compiles, [link]]

    _compile(tc, target, CORE_SOURCES, commands, stop)


def _compile_ops(tc: Toolchain, core: Path, target: Path, stop) -> None:
    """One translation unit including the three sources (each alone parses the same ATen headers for
    ~4 s), linked against the core library by its soname (found beside it: ``$ORIGIN``)."""
    def commands(objects: str, partial: str) -> list[list[str]]:
        unit = os.path.join(objects, "neuron_ops_unit.cpp")
        with open(unit, "w") as f:
            f.writelines(f'#include "{source}"\n' for source in OPS_SOURCES)
        obj = os.path.join(objects, "neuron_ops_unit.o")
        compile_ = [tc.compiler, *_flags(tc), "-c", unit, "-o", obj]
        link = [tc.compiler, "-shared", "-fPIC", obj, "-o", partial, "-L", str(core.parent),
                f"-l:{core.name}", "-Wl,-rpath,$ORIGIN", "-L", tc.lib, "-lc10", "-ltorch_cpu",
                f"-Wl,-rpath,{tc.lib}"]
        return [[compile_], [link]]

    _compile(tc, target, OPS_SOURCES, commands, stop)


def _compile(tc: Toolchain, target: Path, sources: tuple[Path, ...], commands, stop) -> None:
    fd, partial = tempfile.mkstemp(prefix=target.stem + ".", suffix=".partial", dir=target.parent)
    os.close(fd)
    failed = None
    try:
        with tempfile.TemporaryDirectory(prefix=target.stem + ".", dir=target.parent) as objects:
            for stage in commands(objects, partial):
                failed = _run_together(stage, stop)
                if failed is not None:
                    break
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(partial)
        raise NativeBuildError(
            f"compiling {_names(sources)} with {tc.compiler} failed: {exc}. {_why()}") from exc
    except Stopped:
        os.unlink(partial)
        raise
    if failed is not None:
        os.unlink(partial)
        command, returncode, output = failed
        tail = "\n".join(output.strip().splitlines()[-20:])
        raise NativeBuildError(
            f"compiling {_names(sources)} with {tc.compiler} failed (exit status {returncode}). "
            f"{_why()}\n$ {' '.join(command)}\n{tail}"
        )
    os.chmod(partial, 0o755)  # (mkstemp made it private; the cache may be shared)
    os.replace(partial, target)


def _run_together(commands: list[list[str]], stop=None) -> tuple[list[str], int, str] | None:
    """Run ``commands`` side by side; the first that failed (command, exit status, output), else None.
    Raises :class:`Stopped` (the commands killed) as soon as ``stop()`` is true."""
    deadline = time.monotonic() + COMPILE_TIMEOUT_S
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryFile() as out:  # (a file, not a pipe: a long error never blocks the compiler)
        try:
            for command in commands:
                procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
            for p in procs:
                while True:
                    try:
                        p.wait(timeout=_POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        if stop is not None and stop():
                            raise Stopped from None
                        if time.monotonic() > deadline:
                            raise subprocess.TimeoutExpired(p.args, COMPILE_TIMEOUT_S) from None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        out.seek(0)
        output = out.read().decode(errors="replace")
    for command, p in zip(commands, procs, strict=True):
        if p.returncode != 0:
            return command, p.returncode, output
    return None


def _names(sources: tuple[Path, ...]) -> str:
    *first, last = (source.name for source in sources)
    return f"{', '.join(first)} and {last}"
