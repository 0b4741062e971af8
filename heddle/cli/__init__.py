"""The ``heddle`` command. Each command module registers itself on the groups of ``apps``."""

from __future__ import annotations

import importlib
import sys

from rich.console import Console

from heddle.cli.apps import app
from heddle.errors import UserError

_COMMAND_MODULES = (
    "db",
    "replay",
    "bench_bus",
    "bench_policy",
    "sim",
    "sim_sweep",
    "sim_figures",
    "tools",
    "bench_tools",
    "worker",
    "bench_engine",
    "rollout",
    "rollout_submit",
    "up",
    "status",
    "bench_fidelity",
    "bench_control",
    "ops",
    "bench_chaos",
    "deploy",
    "bench_cluster",
    "predictor",
    "bench_predictor",
    "bench_integrations",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(f"heddle.cli.{_name}")


def main() -> None:
    """Entry point: user errors print one line and exit 2."""
    try:
        app()
    except UserError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
