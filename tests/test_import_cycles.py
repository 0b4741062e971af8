"""No import cycle between modules of ``heddle``: every import counts, at any depth (inside a
function, under ``if TYPE_CHECKING``), relative ones resolved; ``from pkg import name`` is an
import of the module ``pkg.name`` when there is one, else of ``pkg``. A cycle broken by an import
inside a function still makes two modules that can only be read together, so it fails too.

``tests/test_layers.py`` keeps packages pointing down; this keeps modules within a package so."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import heddle

ROOT = Path(str(heddle.__file__)).parent


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root`` (a package named for its
    folder; ``__init__`` is the package itself)."""
    files = {}
    for path in root.rglob("*.py"):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def imported_modules(module: str, path: Path, files: dict[str, Path]) -> Iterator[str]:
    """Every module of ``files`` that ``module`` imports: ``import a.b`` and ``from a import b``
    import ``a.b`` when it is a module, else the closest package above it; relative imports are
    resolved against ``module``'s package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                for alias in node.names
            ]
        for name in names:
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name:
                yield name


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root``'s package it imports (itself aside)."""
    files = module_files(root)
    return {
        module: set(imported_modules(module, path, files)) - {module}
        for module, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, as the path
    ``a -> b -> ... -> a`` (Tarjan's algorithm, then a shortest way back within the component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_cycle_in(graph, component) for component in components)


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_no_import_cycle_between_modules() -> None:
    found = [" -> ".join(cycle) for cycle in cycles(import_graph(ROOT))]
    assert found == [], "import cycles (break each by moving what both need to a lower module)"


def test_the_check_finds_cycles_at_any_depth_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.leaf import VALUE\n")
    (package / "sub" / "leaf.py").write_text("VALUE = 1\n")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text("from . import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    (package / "d.py").write_text("from pkg.sub import VALUE\nfrom .sub.leaf import VALUE\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert graph["pkg.d"] == {"pkg.sub", "pkg.sub.leaf"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    (package / "c.py").write_text("")
    assert cycles(import_graph(package)) == []
