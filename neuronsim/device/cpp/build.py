"""Build the device's C++ library (``neuron_device.cpp``, ``neuron_memory.cpp``, ``neuron_keys.cpp``,
``neuron_ops.cpp``) with the system C++ compiler once per torch version and source, cached.

The library is compiled against the installed torch's own headers (its wheel ships them) and
links its libc10/libtorch_cpu/libtorch_python, so it always matches the torch in use. The cache key
is the torch version, the C++ ABI flag, the compiler and the sources' hash; a library is written under a
temporary name and renamed into place while holding a file lock, so processes starting together
(torchrun's ranks on a fresh machine) build it once and never load a half-written file.

The cache is the neuronsim cache directory (``NEURON_SIM_CACHE_DIR``, else ``~/.cache/neuronsim``).
The libraries are plain files in it: the Numba cache keeps its own subdirectories there.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from neuronsim import env
from neuronsim.errors import NativeBuildError

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("neuron_device.cpp", "neuron_memory.cpp", "neuron_keys.cpp", "neuron_ops.cpp"))
HEADERS = (Path(__file__).with_name("neuron_memory.h"), Path(__file__).with_name("neuron_keys.h"))
COMPILE_TIMEOUT_S = 600  # a cold compile takes a few seconds; a loaded CI machine, much longer
_COMPILERS = ("g++", "c++", "clang++")


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
        f"once per torch version from {_names()} against torch's headers and cached in {cache_dir()}."
    )


def _torch_paths() -> tuple[Path, Path, bool]:
    import torch

    root = Path(torch.__file__).parent
    return root / "include", root / "lib", bool(torch._C._GLIBCXX_USE_CXX11_ABI)


def library_path(compiler: str) -> Path:
    import torch

    include, lib, abi = _torch_paths()
    h = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        h.update(source.read_bytes())
    for part in (torch.__version__, str(abi), compiler, str(include)):
        h.update(b"\0" + part.encode())
    return cache_dir() / f"neuron_device-torch{torch.__version__}-{h.hexdigest()[:16]}.so"


def build() -> Path:
    """The library's path, compiling it first if no process has yet."""
    compiler = find_compiler()
    target = library_path(compiler)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "neuron_device.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not target.exists():
            _compile(compiler, target)
    return target


def _compile(compiler: str, target: Path) -> None:
    """Each source into an object file, all at once (on a loaded machine g++ takes a minute per source:
    side by side the wall is the slowest one's, where one command compiles them in turn), then one link."""
    include, lib, abi = _torch_paths()
    flags = ["-O2", "-std=c++20", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}"]
    fd, partial = tempfile.mkstemp(prefix=target.stem + ".", suffix=".partial", dir=target.parent)
    os.close(fd)
    with tempfile.TemporaryDirectory(prefix=target.stem + ".", dir=target.parent) as objects:
        compiles = [[compiler, *flags, "-c", "-I", str(include), str(source), "-o",
                     os.path.join(objects, source.stem + ".o")] for source in SOURCES]
        link = [compiler, "-shared", "-fPIC", *(c[-1] for c in compiles), "-o", partial,
                "-L", str(lib), "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}"]
        try:
            failed = _run_together(compiles) or _run_together([link])
        except (OSError, subprocess.TimeoutExpired) as exc:
            os.unlink(partial)
            raise NativeBuildError(f"compiling {_names()} with {compiler} failed: {exc}. {_why()}") from exc
    if failed is not None:
        os.unlink(partial)
        command, returncode, output = failed
        tail = "\n".join(output.strip().splitlines()[-20:])
        raise NativeBuildError(
            f"compiling {_names()} with {compiler} failed (exit status {returncode}). "
            f"{_why()}\n$ {' '.join(command)}\n{tail}"
        )
    os.chmod(partial, 0o755)  # (mkstemp made it private; the cache may be shared)
    os.replace(partial, target)


def _run_together(commands: list[list[str]]) -> tuple[list[str], int, str] | None:
    """Run ``commands`` side by side; the first that failed (command, exit status, output), else None."""
    deadline = time.monotonic() + COMPILE_TIMEOUT_S
    procs: list[subprocess.Popen] = []
    try:
        for command in commands:
            procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outputs = [p.communicate(timeout=max(deadline - time.monotonic(), 0.0))[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for command, p, output in zip(commands, procs, outputs, strict=True):
        if p.returncode != 0:
            return command, p.returncode, output
    return None


def _names() -> str:
    *first, last = (source.name for source in SOURCES)
    return f"{', '.join(first)} and {last}"
