"""`heddle bench reshard`: both systems run each cell on the same plan, a restart cost that
triggers nothing ends the cell's runs (the dearer ones count as no re-shard), and the summary's
ratios follow the makespans; the command prints them as one JSON object."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from heddle.bench.reshard import (
    ReshardBenchConfig,
    ReshardCell,
    RestartRun,
    bench_reshard,
    one_cell,
    summary,
)
from heddle.cli.apps import app
from heddle.errors import UserError
from heddle.experiments.cells import Cell
from heddle.experiments.sweep import SweepConfig

SMALL = SweepConfig(families=("math",), num_cells=1, steps_per_cell=200, min_trajectories=16)


def result(runs: list[RestartRun], no_reshard_s: float = 100.0) -> ReshardCell:
    return ReshardCell(Cell(0, "math", 0, "qwen3-8b", 8, 0.5), 0.5, [1] * 8, 50.0, no_reshard_s,
                       runs, 1.0)  # fmt: skip


def test_a_restart_cost_after_one_that_triggers_nothing_counts_as_none() -> None:
    cell = result([RestartRun(10.0, 80.0, 1), RestartRun(30.0, 100.0, 0)])
    assert cell.makespan_at(10.0) == (80.0, 1)
    assert cell.makespan_at(90.0) == (100.0, 0)  # skipped: no re-shard, the baseline's makespan
    document = summary([cell, result([RestartRun(10.0, 100.0, 0)])], (10.0, 90.0))
    assert document["10"] == {
        "cells_triggered": [0],
        "geomean_ratio": pytest.approx((0.8 * 1.0) ** 0.5),
        "geomean_ratio_triggered": pytest.approx(0.8),
        "worst_ratio": 1.0,
    }


def test_a_cell_runs_both_systems_on_one_plan() -> None:
    config = ReshardBenchConfig(SMALL, (10.0, 30.0), tp_degrees=(1, 1, 2, 4))
    (cell,) = bench_reshard(config, one_cell("math", 3, "qwen3-8b", 8, 0.5))
    assert cell.tp_degrees == [1, 1, 2, 4]
    assert [run.engine_restart_s for run in cell.runs][:1] == [10.0]
    for run in cell.runs:
        if not run.num_reshards:
            assert run.makespan_s == pytest.approx(cell.no_reshard_s)


def test_the_command_prints_one_json_object() -> None:
    runner = CliRunner()
    outcome = runner.invoke(
        app,
        ["bench", "reshard", "--cell", "math,3,qwen3-8b,8,0.5", "--plan", "2,2,2,2",
         "--restarts", "30", "--steps-per-cell", "200", "--predictor", "oracle", "--json"],
    )  # fmt: skip
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.output)
    assert document["restarts_s"] == [30.0]
    (cell,) = document["cells"]
    assert cell["tp_degrees"] == [2, 2, 2, 2] and set(document["summary"]) == {"30"}


def test_an_unknown_predictor_is_a_user_error() -> None:
    outcome = CliRunner().invoke(app, ["bench", "reshard", "--predictor", "psychic"])
    assert isinstance(outcome.exception, UserError)
    assert "unknown --predictor 'psychic'" in str(outcome.exception)
