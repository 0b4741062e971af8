"""`heddle bench reshard`: tail re-sharding on zoo cells, heddle against heddle-no-reshard on the
same plan at several engine restart costs (``heddle.bench.reshard``); or one cell named by
``--cell family,draw,model,gpus,kv``. A table, or one JSON object with ``--json``."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from heddle.bench.reshard import (
    ReshardBenchConfig,
    ReshardCell,
    bench_reshard,
    one_cell,
    summary,
)
from heddle.cli.apps import bench_app
from heddle.cli.sim_sweep import _sweep_list
from heddle.errors import UserError
from heddle.experiments.cells import Cell
from heddle.experiments.sweep import SweepConfig
from heddle.policy.prediction import PREDICTORS
from heddle.workloads.zoo import ZOO

_DEFAULTS = SweepConfig()


@bench_app.command("reshard")
def bench_reshard_command(
    cells: Annotated[int, typer.Option(help="Zoo cells (the sweep's first N)", min=1)] = 40,
    families: Annotated[str, typer.Option(help="Comma-separated zoo families")] = ",".join(
        _DEFAULTS.families
    ),
    restarts: Annotated[
        str, typer.Option(help="Comma-separated engine restart costs (s), cheapest first")
    ] = "10,30,90",
    cell: Annotated[
        str, typer.Option(help="One cell instead: family,draw seed,model,GPUs,KV ratio")
    ] = "",
    plan: Annotated[
        str, typer.Option(help="A fixed plan for both, comma-separated TP degrees")
    ] = "",
    cold: Annotated[bool, typer.Option(help="No history: the first step of training")] = False,
    predictor: Annotated[
        str, typer.Option(help="Predictor of both systems (oracle: without prediction error)")
    ] = _DEFAULTS.predictor,
    steps_per_cell: Annotated[
        int, typer.Option(help="Trajectory steps per cell (sizes each cell)", min=1)
    ] = _DEFAULTS.steps_per_cell,
    jobs: Annotated[int, typer.Option(help="Worker processes", min=1)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """heddle vs heddle-no-reshard per cell: makespans, re-shards, cost sensitivity."""
    restarts_s = tuple(sorted(_sweep_list("--restarts", restarts, float)))
    family_names = _sweep_list("--families", families, str, ZOO)
    if predictor not in PREDICTORS:
        raise UserError(f"unknown --predictor {predictor!r}; choose one of {sorted(PREDICTORS)}")
    chosen = _one(cell) if cell else None
    sweep = SweepConfig(
        families=family_names, num_cells=cells, steps_per_cell=steps_per_cell, predictor=predictor
    )
    if chosen is not None:
        sweep = replace(sweep, families=(chosen[0].family,), num_cells=1)
    degrees = _plan(plan) if plan else ()
    try:
        config = ReshardBenchConfig(sweep, restarts_s, cold, tuple(degrees))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    results = bench_reshard(config, chosen, jobs)
    document = {
        "restarts_s": list(restarts_s),
        "cold": cold,
        "cells": [asdict(result) for result in results],
        "summary": summary(results, restarts_s),
    }
    if as_json:
        print(json.dumps(document))
        return
    Console().print(_table(results, restarts_s))
    Console().print(json.dumps(document["summary"], indent=1))


def _plan(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--plan {text!r}: give comma-separated TP degrees") from None


def _one(text: str) -> list[Cell]:
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 5 or parts[0] not in ZOO:
        raise UserError(f"--cell {text!r}: give family,draw seed,model,GPUs,KV ratio")
    try:
        return one_cell(parts[0], int(parts[1]), parts[2], int(parts[3]), float(parts[4]))
    except ValueError as exc:
        raise UserError(f"--cell {text!r}: {exc}") from None


def _table(results: list[ReshardCell], restarts_s: tuple[float, ...]) -> Table:
    table = Table(title="heddle / heddle-no-reshard (same plan), re-shards")
    for column in ("cell", "plan", "no-reshard s", *(f"{r:g} s restart" for r in restarts_s)):
        table.add_column(column)
    for result in results:
        c = result.cell
        name = f"{c.index} {c.family} {c.model} x{c.num_gpus} kv {result.kv_ratio:.2f}"
        cells = []
        for restart_s in restarts_s:
            makespan_s, num = result.makespan_at(restart_s)
            cells.append(f"{makespan_s / result.no_reshard_s:.3f} ({num})")
        plan = ",".join(map(str, result.tp_degrees))
        table.add_row(name, plan, f"{result.no_reshard_s:.0f}", *cells)
    return table
