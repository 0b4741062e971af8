"""The ``heddle`` command. Each command module registers itself on the groups of ``apps``.

Command modules (imported below, in ``_COMMAND_MODULES``): ``rollout`` (``heddle rollout run |
compare``), ``rollout_submit`` (``submit | cancel | delete-payloads`` on a running control plane),
``up`` (the long-lived control plane), ``status`` (``heddle status``), ``ops`` (the operations
service from the shell), ``worker`` (``heddle worker``, ``heddle workers run N``), ``tools``
(``heddle tools exec | serve``), ``predictor`` (``heddle predictor train | serve``), ``replay``
(``heddle replay``), ``lifecycle`` (``heddle archive``, ``heddle purge``), ``db`` (ledger
administration), ``deploy`` (``heddle deploy``), ``sim``
(``heddle sim compare``), ``sim_sweep`` (``heddle sim sweep``), ``sim_figures`` (``heddle sim
figures``), ``sim_hunt`` (``heddle sim hunt``), and the benchmarks ``bench_bus``,
``bench_control``, ``bench_engine``, ``bench_fidelity``, ``bench_chaos``, ``bench_cluster``,
``bench_tools``, ``bench_predictor``, ``bench_integrations``, ``bench_lifecycle``,
``bench_reshard``, ``bench_hops`` (``heddle bench <name>``) and ``bench_policy`` (``heddle bench
placement | annealing``).

Helpers: ``apps`` (the command groups), ``__main__`` (``python -m heddle.cli``), ``options``
(options several commands take: engine, tokenizer, heartbeats, seed, time scale), ``rollout_flags``
(the flags ``rollout run`` and ``compare`` share), ``sim_choices`` (model and system name checks of
``sim compare`` and ``sim sweep``), ``sim_loop`` (``heddle sim compare --async-steps``, the training
loop), ``planner_report`` (the figures of ``heddle bench annealing``).
"""

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
    "sim_hunt",
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
    "lifecycle",
    "bench_lifecycle",
    "bench_reshard",
    "bench_hops",
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
