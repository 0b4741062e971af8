"""The product packages never import the benchmarks: only ``heddle.bench`` and ``heddle.cli`` do."""

from __future__ import annotations

import ast
from pathlib import Path

import heddle

PACKAGE_ROOT = Path(heddle.__file__).parent
MAY_IMPORT_BENCH = {"bench", "cli"}


def imports_bench(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name == "heddle.bench" or name.startswith("heddle.bench.") for name in names):
            return True
    return False


def test_product_packages_do_not_import_the_benchmarks() -> None:
    offenders = [
        str(path.relative_to(PACKAGE_ROOT))
        for path in sorted(PACKAGE_ROOT.rglob("*.py"))
        if path.relative_to(PACKAGE_ROOT).parts[0] not in MAY_IMPORT_BENCH and imports_bench(path)
    ]
    assert offenders == []


def test_the_check_sees_a_bench_import(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("from heddle.bench.control import BenchOptions\n")
    assert imports_bench(module)
    module.write_text("from heddle import bench\n")
    assert imports_bench(module)
    module.write_text("from heddle.rollout import runner\n")
    assert not imports_bench(module)
