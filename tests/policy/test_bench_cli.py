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


def test_bench_annealing_prints_json_against_baselines_and_exhaustive() -> None:
    args = ["bench", "annealing", "--gpus", "8", "--n", "200", "--small-budgets", "4", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["makespan_s"] <= min(report["fix1_makespan_s"], report["fix8_makespan_s"])
    (small,) = report["small_budgets"]
    assert small["gpus"] == 4 and small["gap_vs_exhaustive"] <= 0.03


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
        ["bench", "annealing", "--n", "10", "--small-budgets", "4,x"],
    ],
)
def test_bad_flags_raise_user_errors(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, UserError)
