"""heddle/policy and heddle/control stay pure (docs/design.md's layers): no network, database,
clock,
process or OS access, and nothing of Heddle's impure layers (bus, ledger, workers, consumers)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import pytest

import heddle.control
import heddle.policy

FORBIDDEN = {
    "nats",
    "sqlalchemy",
    "httpx",
    "requests",
    "socket",
    "subprocess",
    "time",
    "datetime",
    "asyncio",
    "os",
    "pathlib",
    "threading",
    "multiprocessing",
    "urllib",
    "shutil",
}


PURE_HEDDLE = {
    "heddle.policy": {"heddle.policy", "heddle.events", "heddle.ids", "heddle.traces"},
    "heddle.control": {
        "heddle.control",
        "heddle.policy",
        "heddle.events",
        "heddle.ids",
        "heddle.traces",
    },
}
"""The Heddle modules each pure layer may import (data types and pure code only)."""


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def offence(module: str, allowed: set[str]) -> bool:
    root = module.split(".")[0]
    if root == "heddle":
        return ".".join(module.split(".")[:2]) not in allowed
    return root in FORBIDDEN


@pytest.mark.parametrize("package", [heddle.policy, heddle.control], ids=lambda p: p.__name__)
def test_pure_layers_import_nothing_impure(package: ModuleType) -> None:
    root = Path(str(package.__file__)).parent
    allowed = PURE_HEDDLE[package.__name__]
    offenders = {
        str(path.relative_to(root)): sorted(
            m for m in imported_modules(path) if offence(m, allowed)
        )
        for path in root.rglob("*.py")
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}
