"""`heddle sim compare`: one JSON object on the same trace for every system; one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.cli import app
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.sim.accounting import COLUMN_KEYS
from heddle.traces import write_trace
from heddle.workloads import generate

HEDDLE = [sys.executable, "-c", "from heddle.cli import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HEDDLE, "sim", "compare", *args], capture_output=True, text=True)


def test_compare_prints_one_json_object_per_run(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, generate("math", 24, seed=1))
    result = run(
        "--trace",
        str(trace),
        "--model",
        "8b",
        "--gpus",
        "4",
        "--systems",
        "heddle,verl,slime",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["num_trajectories"] == 24 and document["source"] == f"trace:{trace}"
    assert set(document["systems"]) == {"heddle", "verl", "slime"}
    for row in document["systems"].values():
        assert row["makespan_s"] >= row["lower_bound_s"] > 0
        assert row["makespan_over_lb"] >= 1.0 and row["throughput_tok_s"] > 0
        assert set(row["slowest"]) >= {"queue_s", "generation_s", "tool_s", "migration_s"}
    assert set(document["throughput_ratios"]) == {"heddle_over_verl", "heddle_over_slime"}


def test_every_system_s_slowest_has_every_column_and_they_sum_to_its_total(
    tmp_path: Path,
) -> None:
    trace, history = tmp_path / "trace.jsonl", tmp_path / "history.jsonl"
    write_trace(trace, generate("math", 16, seed=2))
    write_trace(history, generate("math", 16, seed=2, epoch=1))
    args = ["--trace", str(trace), "--history", str(history), "--model", "8b", "--gpus", "2"]
    result = CliRunner().invoke(app, ["sim", "compare", *args, "--systems", "all", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document["systems"]) == set(SYSTEMS)
    for name, row in document["systems"].items():
        slowest = row["slowest"]
        assert slowest["columns"] == list(COLUMN_KEYS)
        total = sum(slowest[key] for key in slowest["columns"])
        assert total == pytest.approx(slowest["total_s"], rel=1e-9), name
        assert row["makespan_s"] >= row["lower_bound_s"]


def test_compare_all_lists_every_system_and_the_reference_apart(tmp_path: Path) -> None:
    trace, history = tmp_path / "trace.jsonl", tmp_path / "history.jsonl"
    write_trace(trace, generate("math", 12, seed=2))
    write_trace(history, generate("math", 12, seed=2, epoch=1))
    result = run(
        *("--trace", str(trace), "--history", str(history), "--model", "8b", "--gpus", "2"),
        *("--systems", "all", "--reference", "--json"),
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert list(document["systems"]) == list(SYSTEMS)  # thunderagent and the capped ones
    assert {"thunderagent", "slime", "verl"} <= set(document["systems"])
    assert all("concurrency_cap" in row for row in document["systems"].values())
    reference = document["reference"]
    assert "reference" not in document["systems"] and reference["num_plans"] == 2
    heddle = document["systems"]["heddle"]
    assert reference["heddle_over_reference"] == pytest.approx(
        heddle["makespan_s"] / reference["makespan_s"]
    )
    assert reference["heddle_over_lb"] == pytest.approx(
        reference["heddle_over_reference"] * reference["reference_over_lb"]
    )


def test_a_bad_trace_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt_tokens": 3, "steps": []}\n')
    result = run("--trace", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {bad}:1: steps: needs at least one step"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "coding", "--systems", "heddle,nope"], "unknown system 'nope'"),
        (["--workload", "poetry"], "unknown --workload 'poetry'"),
        (["--workload", "coding", "--model", "70b"], "unknown --model '70b'"),
        (["--workload", "coding", "--gpus", "0"], "num_gpus must be >= 1"),
        (["--workload", "coding", "--hardware", "b200"], "unknown --hardware 'b200'"),
        (
            ["--workload", "coding", "--control-latency-p50-ms", "90"],
            "control_latency_p50_ms <= control_latency_p99_ms",
        ),
        ([], "give exactly one of --workload or --trace"),
    ],
)
def test_bad_flags_are_user_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "compare", *args])
    assert isinstance(result.exception, UserError)
    assert message in str(result.exception)


def test_compare_async_steps_prints_both_loops_and_their_ratio(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, generate("coding", 16, seed=1))
    result = run(
        *("--trace", str(trace), "--model", "8b", "--gpus", "2", "--systems", "verl"),
        *("--async-steps", "2", "--max-staleness", "1", "--trainer-fraction", "0.5", "--json"),
    )
    assert result.returncode == 0, result.stderr
    loops = json.loads(result.stdout)["systems"]["verl"]
    stop, partial = loops["stop_the_world"], loops["partial_rollout"]
    assert stop["max_staleness"] == 0 and partial["max_staleness"] == 1
    assert stop["num_completed"] == partial["num_completed"] == 32
    assert partial["max_staleness_seen"] <= 1
    ratio = partial["trajectories_per_hour"] / stop["trajectories_per_hour"]
    assert loops["trajectories_per_hour_ratio"] == pytest.approx(ratio)


def test_compare_async_steps_refuses_two_trainer_times() -> None:
    result = run(
        *("--workload", "coding", "--trajectories", "8", "--async-steps", "2"),
        *("--trainer-s", "10", "--trainer-fraction", "0.5"),
    )
    assert result.returncode == 2
    assert "at most one of --trainer-s and --trainer-fraction" in result.stderr


def test_a_workload_s_history_is_other_prompts_unless_named() -> None:
    from heddle.cli.sim import _traces

    rollout, other, _ = _traces("math", None, None, 16, 3)
    assert not {t.group for t in other} & {t.group for t in rollout}
    _, same, _ = _traces("math", None, None, 16, 3, "same")
    assert [t.group for t in same] == [t.group for t in rollout]
    assert _traces("math", None, None, 16, 3, "none")[1] == []
    with pytest.raises(UserError, match="unknown history 'yesterday'"):
        _traces("math", None, None, 16, 3, "yesterday")
    base = ["--workload", "math", "--trajectories", "16", "--model", "8b", "--gpus", "4"]
    result = CliRunner().invoke(
        app, ["sim", "compare", *base, "--systems", "verl", "--workload-history", "same", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["history"] == "same"
