"""The layers of neuronsim stay layers (docs/layout.md): ``neuronsim.sim`` imports no torch, click or
rich; ``kernels/`` and ``nki/`` never import ``device/``; the profiler imports neither the device nor
nki; and no module is over 600 lines.

Two checks per rule: each layer's files never name a forbidden module (any import, function bodies
included), and importing every module of the layer in a fresh interpreter leaves the forbidden
modules unloaded (what the layer pulls in through its own imports, transitively)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import neuronsim

ROOT = Path(neuronsim.__file__).parent
MAX_LINES = 600

# layer (a package of neuronsim) -> modules it must never load or name
FORBIDDEN = {
    "sim": ("torch", "click", "rich"),
    "kernels": ("neuronsim.device",),
    "nki": ("neuronsim.device",),
    "profiler": ("neuronsim.device", "neuronsim.nki"),
}
# The OpInfo conformance runner lives with the kernels it checks but runs them on the device:
# a command above the device (``python -m neuronsim.kernels.conformance``), not part of the layer.
RUNNERS = {"neuronsim.kernels.conformance"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_files(layer: str) -> dict[str, Path]:
    files = {_module_name(p): p for p in sorted((ROOT / layer).rglob("*.py"))}
    return {name: path for name, path in files.items() if name not in RUNNERS}


def _imported_names(path: Path, name: str):
    """Every module ``path`` imports, anywhere in the file (relative imports resolved), or names as
    a whole string (``importlib.import_module("neuronsim.device")``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"neuronsim(\.\w+)+", node.value):
                yield node.value


def _is_within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_layer_file_names_a_module_above_it():
    found = []
    for layer, forbidden in FORBIDDEN.items():
        files = _layer_files(layer)
        assert len(files) > 3, layer  # the walk found the layer
        for name, path in files.items():
            bad = sorted({m for m in _imported_names(path, name) if any(_is_within(m, f) for f in forbidden)})
            found += [f"{path.relative_to(ROOT.parent)} imports {m}" for m in bad]
    assert found == [], "\n".join(found)


_LOADER = """
import importlib, json, sys
layers = json.loads(sys.argv[1])
leaks = {}
for layer, (modules, forbidden) in layers.items():  # lowest layer first: a leak is the layer's own
    for module in modules:
        importlib.import_module(module)
    loaded = [m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
    if loaded:
        leaks[layer] = sorted(loaded)[:5]
print(json.dumps(leaks))
"""


def test_importing_a_layer_loads_nothing_above_it():
    """One interpreter imports every module of sim, then the profiler, nki and kernels; after each
    layer none of its forbidden modules may be loaded. ``import torch`` would load the device
    through its backend autoload entry point, so that is off here (it is the device's own hook)."""
    order = ("sim", "profiler", "nki", "kernels")
    scripts = ("__main__",)  # ``python -m`` entry points run when imported
    layers = {layer: ([m for m in sorted(_layer_files(layer)) if not m.endswith(scripts)], FORBIDDEN[layer])
              for layer in order}
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    done = subprocess.run([sys.executable, "-c", _LOADER, json.dumps(layers)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    leaks = json.loads(done.stdout.strip().splitlines()[-1])
    assert leaks == {}, f"layer -> modules above it that importing the layer loaded: {leaks}"


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(ROOT.parent)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    over = sorted(((n, path) for path, n in sizes.items() if n > MAX_LINES), reverse=True)
    assert len(sizes) > 100  # the walk found the package
    assert over == [], "modules over 600 lines (split them along their seams):\n" + "\n".join(
        f"  {path}: {n} lines" for n, path in over)
