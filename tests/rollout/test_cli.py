"""Bad flags and bad files give one clear line (``UserError``) before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import heddle.cli  # noqa: F401  (registers the commands on the app)
from heddle.cli.apps import app
from heddle.errors import UserError


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"question": "1+1?", "answer": "2"}\n{"question": \n')
    bad_field = tmp_path / "field.jsonl"
    bad_field.write_text('{"question": "1+1?"}\n')
    bad_trace = tmp_path / "trace.jsonl"
    bad_trace.write_text('{"id": "a", "prompt_tokens": -3, "steps": [{"output_tokens": 1}]}\n')
    return {"bad_json": bad_json, "bad_field": bad_field, "bad_trace": bad_trace}


CASES: list[tuple[list[str], str]] = [
    (["rollout", "run", "--workload", "nope"], "unknown --workload 'nope'"),
    (["rollout", "run"], "exactly one of --workload, --trace or --tasks"),
    (["rollout", "run", "--workload", "coding", "--trace", "x.jsonl"], "exactly one"),
    (["rollout", "run", "--tasks", "{bad_json}", "--env", "math"], "bad.jsonl:2: not valid JSON"),
    (["rollout", "run", "--tasks", "{bad_field}", "--env", "math"], "field.jsonl:1"),
    (["rollout", "run", "--tasks", "{bad_json}"], "--tasks needs --env"),
    (["rollout", "run", "--trace", "{bad_trace}"], "trace.jsonl:1: prompt_tokens"),
    (["rollout", "run", "--trace", "/no/such.jsonl"], "cannot read trace file"),
    (["rollout", "run", "--workload", "coding", "--policy", "nope"], "unknown --policy 'nope'"),
    (["rollout", "run", "--workload", "coding", "--time-scal", "9"], "unknown option --time-scal"),
    (["rollout", "run", "--workload", "coding", "--time-scale", "0"], "time_scale must be > 0"),
    (["rollout", "run", "--workload", "coding", "--gpus", "0"], "--gpus must be >= 1"),
    (["rollout", "run", "--workload", "coding", "--trajectories", "0"], "--trajectories"),
    (["rollout", "run", "--workload", "coding", "--predictor", "psychic"], "unknown predictor"),
    (["rollout", "compare", "--policies", "heddle", "--workload", "coding"], "at least two"),
    (["rollout", "compare", "--workload", "coding", "--gpus", "4", "--workers", "2"], "not both"),
    (["rollout", "submit", "/no/such.jsonl"], "cannot read trace file"),
    (["rollout", "cancel", "bad id"], "not a valid id"),
    (["up", "--cost-model", "gpt-9"], "gpt-9"),
    (["up", "--time-scale", "3"], "need --workers N"),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_bad_input_is_one_clear_line(args: list[str], message: str, files: dict[str, Path]) -> None:
    argv = [arg.format(**{k: str(v) for k, v in files.items()}) for arg in args]
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, UserError), (result.exception, result.output)
    text = str(result.exception)
    assert message in text
    assert "\n" not in text.strip()


def test_the_command_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", "from heddle.cli import main; main()", "rollout", "run",
         "--workload", "coding", "--policy", "nope"],
        capture_output=True, text=True, timeout=60,
        env={"HEDDLE_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown --policy 'nope'" in lines[0]


@pytest.mark.parametrize(
    "command",
    [["rollout", "run"], ["rollout", "compare"], ["rollout", "submit"], ["up"], ["worker"],
     ["workers", "run"]],
    ids=" ".join,
)  # fmt: skip
def test_every_command_that_takes_a_time_scale_shows_it_in_its_help(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--time-scale" in result.output
