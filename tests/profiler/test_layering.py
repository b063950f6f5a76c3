"""The profiler reads timelines and event records: importing it pulls in neither torch nor the simulator."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import neuronsim.profiler

MODULES = ["neuronsim.profiler", "neuronsim.profiler.report", "neuronsim.profiler.html",
           "neuronsim.profiler.session", "neuronsim.profiler.validate", "neuronsim.profiler.compare",
           "neuronsim.profiler.compare_html", "neuronsim.profiler.timeline_model"]


def test_profiler_imports_neither_torch_nor_the_simulator():
    heavy = ("torch", "numba", "neuronsim.sim", "neuronsim.device", "rich", "click")
    code = f"import sys; import {', '.join(MODULES)}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _imported_names(path):
    """Every module a file imports (at any depth, function bodies too) or names as a whole string
    (``importlib.import_module(...)``, ``sys.modules.get(...)``)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"neuronsim(\.\w+)+", node.value):
                yield node.value


def test_profiler_sources_import_neither_the_device_nor_nki():
    """Producers register with the profiler (the device its clock reader, nki.simulate its
    launches); the profiler reaches for neither, not even inside a function."""
    package = Path(neuronsim.profiler.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for name in _imported_names(path):
            if name.split(".")[:2] in (["neuronsim", "device"], ["neuronsim", "nki"]):
                found.append(f"{path.name}: {name}")
    assert found == []
