"""Imports point down: every package of ``heddle`` has a layer (docs/design.md) and imports only
from packages of lower layers (or from itself); no package-level import cycle exists."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import heddle

LAYERS: dict[str, int] = {
    # data types and shared leaves
    "heddle.ids": 0,
    "heddle.errors": 0,
    "heddle.config": 1,
    "heddle.traces": 0,
    "heddle.events": 1,
    # the pure core
    "heddle.policy": 2,
    "heddle.control": 3,
    "heddle.workloads": 3,
    # adapters
    "heddle.bus": 4,
    "heddle.sim": 4,
    "heddle.ledger": 5,
    "heddle.observability": 6,
    "heddle.context_model": 6,
    # processes
    "heddle.controlplane": 7,
    "heddle.experiments": 7,  # sweeps and studies on the simulator (and the context model)
    "heddle.replay": 7,
    "heddle.workers": 7,
    "heddle.timeline": 8,
    "heddle.whatif": 8,
    "heddle.rollout": 8,
    "heddle.completions": 8,
    "heddle.weights": 8,
    "heddle.client": 9,
    "heddle.lifecycle": 9,
    # what runs on top of a deployment
    "heddle.bench": 10,
    "heddle.deploy": 10,
    "heddle.examples": 10,
    "heddle.integrations": 10,
    "heddle.cli": 11,
}
"""Each package's layer: a package may import packages of lower layers only."""

ROOT = Path(str(heddle.__file__)).parent


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_imports() -> dict[tuple[str, str], set[str]]:
    """(importing package, imported package) -> the files with such an import."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        module = ".".join(("heddle", *path.relative_to(ROOT).with_suffix("").parts))
        source = package_of(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                target = package_of(name)
                if name.startswith("heddle.") and target != source:
                    edges[(source, target)].add(str(path.relative_to(ROOT)))
    return edges


def test_every_package_has_a_layer() -> None:
    packages = {
        package_of(".".join(("heddle", *p.relative_to(ROOT).with_suffix("").parts)))
        for p in ROOT.glob("*")
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert packages - set(LAYERS) == set(), "give each new package a layer in LAYERS"


def test_imports_point_down() -> None:
    upward = {
        f"{source} -> {target}": sorted(files)
        for (source, target), files in package_imports().items()
        if LAYERS.get(target, 99) >= LAYERS.get(source, -1)
    }
    assert upward == {}


def test_no_package_level_import_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in package_imports():
        graph[source].add(target)

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
        return False

    cycles = sorted(
        f"{a} <-> {b}" for a, targets in graph.items() for b in targets if reaches(b, a)
    )
    assert cycles == []
