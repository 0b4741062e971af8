"""Every package's ``__init__`` docstring is a map of the package: each module and subpackage of
it is named there in double backticks (``name``, or ``name/`` for a subpackage)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import heddle

ROOT = Path(heddle.__file__).parent
PACKAGES = sorted(init.parent for init in ROOT.rglob("__init__.py"))


def members(package: Path) -> list[str]:
    """The package's modules (``__init__`` aside) and subpackages, by name."""
    modules = [path.stem for path in package.glob("*.py") if path.stem != "__init__"]
    subpackages = [
        path.name for path in package.iterdir() if path.is_dir() and (path / "__init__.py").exists()
    ]
    return sorted(modules + subpackages)


def unnamed(package: Path) -> list[str]:
    """The members of ``package`` its ``__init__`` docstring does not name in double backticks."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return [name for name in members(package) if not re.search(rf"``{re.escape(name)}/?``", doc)]


def test_the_check_finds_packages_and_their_members() -> None:
    assert ROOT in PACKAGES and ROOT / "workers" / "agent" in PACKAGES
    assert {"bus", "cli", "ids"} <= set(members(ROOT))
    assert "__init__" not in members(ROOT / "bus")


def test_the_check_wants_whole_names_in_double_backticks(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text("")
    for name in ("fold", "fold_steps", "rows", "tables"):
        (package / f"{name}.py").write_text("")
    (package / "__init__.py").write_text(
        '"""Map: ``fold_steps`` (steps), ``sub/`` (a subpackage), `rows`, tables."""\n'
    )
    assert unnamed(package) == ["fold", "rows", "tables"]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_package_map_names_every_module_and_subpackage(package: Path) -> None:
    missing = unnamed(package)
    assert not missing, f"{package.relative_to(ROOT.parent)}/__init__.py does not name: {missing}"
