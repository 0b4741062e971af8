"""heddle/policy stays pure: no network, database, clock, process or OS access."""

from __future__ import annotations

import ast
from pathlib import Path

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


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_policy_modules_import_nothing_impure() -> None:
    package = Path(heddle.policy.__file__).parent
    offenders = {
        str(path.relative_to(package)): sorted(imported_roots(path) & FORBIDDEN)
        for path in package.rglob("*.py")
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}
