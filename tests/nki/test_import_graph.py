"""nki/ is layered: its import graph has no circle (imports inside functions count) and the tracing
core knows nothing of the ISA or the language. (Module sizes and the layers around nki:
tests/test_layers.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import neuronsim.nki

PACKAGE = "neuronsim.nki"
ROOT = Path(neuronsim.nki.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The nki modules ``name`` imports anywhere in its file (function bodies too), explicitly:
    ``from P import x`` is P.x when that is a module, else P (Python also runs the parents'
    ``__init__`` first; every package does, so those edges say nothing about layering)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name) for name in MODULES}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_nki_import_graph_has_no_circle():
    assert len(GRAPH) > 20 and GRAPH[f"{PACKAGE}.isa.common"]  # the walk found the modules and edges
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle)


def _reaches(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for dep in GRAPH[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_tracing_knows_no_isa_or_language_and_kernels_do_not_import_their_runner():
    above = {n for n in MODULES if n.startswith((f"{PACKAGE}.isa", f"{PACKAGE}.language"))}
    for core in ("buffer", "trace", "tensor", "types"):
        assert not _reaches(f"{PACKAGE}.{core}") & above, core
    isa = {n for n in MODULES if n.startswith(f"{PACKAGE}.isa")}
    assert not set().union(*(_reaches(n) for n in isa)) & {n for n in above if ".language" in n}
    assert f"{PACKAGE}.simulate" not in _reaches(f"{PACKAGE}.kernel")
