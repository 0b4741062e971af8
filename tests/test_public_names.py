"""One name per idea: a public module-level name (a class, a function, or an assigned constant
not starting with ``_``) is defined in one module of ``heddle`` only, so a reader who meets the
name knows which thing it is. Two definitions are either one idea (define it once, import it) or
two ideas (give each a name that says it). The exceptions are listed below, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import heddle

ALLOWED: dict[str, str] = {
    # Names private to their module in all but spelling.
    "T": "a TypeVar, local to each generic module",
    "R": "a TypeVar, local to each generic module",
    "M": "a TypeVar, local to each generic module",
    "log": "each module's logger",
    "logger": "each module's logger",
    "__all__": "each package's export list",
    "main": "each runnable module's entry point (python -m ...)",
    # A protocol several modules implement: the name is the contract.
    "KEY": "a figure module's protocol (heddle.bench.figures)",
    "TITLE": "a figure module's protocol (heddle.bench.figures)",
    "PAPER": "a figure module's protocol (heddle.bench.figures)",
    "VARIANTS": "a figure module's protocol (heddle.bench.figures)",
    "num_runs": "a figure module's protocol (heddle.bench.figures)",
    "run": "a figure module's protocol (heddle.bench.figures); heddle.examples.grpo's loop",
    "PROMPT": "an environment module's prompt template (heddle.workers.environments)",
    # An outside contract.
    "publish_weights": "slime's post-write hook, named by its path in slime's "
    "--custom-update-weight-post-write-path (heddle.integrations.slime): the same act as "
    "heddle.weights.publish_weights, in slime's signature",
}

PENDING: dict[str, str] = {}


def defined_names(tree: ast.Module) -> list[str]:
    """The public names a module's body defines (classes, functions, assigned constants)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names += [node.target.id] if node.value is not None else []
    return [name for name in names if not name.startswith("_") or name == "__all__"]


def definitions() -> dict[str, list[str]]:
    """Each public name and the modules (paths under ``heddle``) that define it."""
    root = Path(heddle.__file__).parent
    modules: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for name in set(defined_names(ast.parse(path.read_text()))):
            modules[name].append(path.relative_to(root).as_posix())
    return modules


def duplicates() -> dict[str, list[str]]:
    return {name: paths for name, paths in definitions().items() if len(paths) > 1}


def test_each_public_name_is_defined_once() -> None:
    exceptions = ALLOWED.keys() | PENDING.keys()
    unlisted = {name: paths for name, paths in duplicates().items() if name not in exceptions}
    assert not unlisted, f"public names defined in several modules of heddle: {unlisted}"


def test_the_exceptions_are_still_needed() -> None:
    """An exception whose name is now defined once goes from the list (pending ones stay until
    the lead resolves them: the helpers' merges remove them)."""
    found = duplicates()
    stale = sorted(name for name in ALLOWED if name not in found)
    assert not stale, f"listed exceptions no longer defined twice: {stale}"


def test_the_lists_do_not_overlap() -> None:
    assert not ALLOWED.keys() & PENDING.keys()


def test_the_rule_sees_each_kind_of_definition() -> None:
    source = (
        "class A: ...\n"
        "def b(): ...\n"
        "async def c(): ...\n"
        "D = 1\n"
        "E: int = 2\n"
        "F: int\n"
        "_g = 3\n"
        "if True:\n    H = 4\n"
    )
    assert defined_names(ast.parse(source)) == ["A", "b", "c", "D", "E"]
