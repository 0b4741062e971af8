"""`heddle bench placement` and `heddle bench annealing` on small inputs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import heddle.cli.bench_policy  # noqa: F401  (registers the commands)
from heddle.cli.apps import app
from heddle.errors import UserError

runner = CliRunner()


def test_bench_placement_prints_json_with_equal_makespans() -> None:
    args = ["bench", "placement", "--n", "300", "--m", "4", "--repeats", "2", "--json"]
    result = runner.invoke(app, [*args, "--reference-repeats", "1", "--max-batch", "120"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["equal"] is True
    assert report["makespan"] == report["reference_makespan"]
    assert report["solver_ms"] > 0 and report["speedup"] > 0
    assert report["migration_update_us"] > 0 and 0 <= report["migrations_per_update"] <= 1


def test_bench_annealing_prints_json_against_annealer_and_exhaustive() -> None:
    args = ["bench", "annealing", "--gpus", "4,8", "--n", "200", "--json"]
    result = runner.invoke(app, [*args, "--exhaustive-max-gpus", "4", "--annealer-max-gpus", "8"])
    assert result.exit_code == 0, result.output
    small, large = json.loads(result.output)["budgets"]
    assert (small["gpus"], large["gpus"]) == (4, 8)
    assert small["search_equals_exhaustive"] is True and "exhaustive_objective_s" not in large
    for budget in (small, large):
        assert budget["search_over_annealer"] <= 1.0
        assert budget["estimate_s"] <= budget["best_homogeneous_estimate_s"]
        assert budget["plan_ms"] > 0 and sum(budget["tp_degrees"].values()) >= 1


def test_bench_table_output_is_readable() -> None:
    result = runner.invoke(app, ["bench", "placement", "--n", "50", "--m", "2", "--repeats", "1"])
    assert result.exit_code == 0
    assert "solver_ms" in result.output and "speedup" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "placement", "--m", "0"],
        ["bench", "placement", "--n", "10", "--workload", "chess"],
        ["bench", "annealing", "--gpus", "0"],
        ["bench", "annealing", "--n", "10", "--model", "gpt-9"],
        ["bench", "annealing", "--n", "10", "--gpus", "4,x"],
        ["bench", "annealing", "--n", "10", "--gpus", ""],
    ],
)
def test_bad_flags_raise_user_errors(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, UserError)
