"""The `heddle tools` commands, run through the real CLI."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import heddle.cli.tools  # noqa: F401  (registers the tools commands on the app)
from heddle.cli.apps import app

runner = CliRunner()


def test_exec_prints_one_json_object() -> None:
    result = runner.invoke(
        app, ["tools", "exec", "python", "--timeout-s", "5"], input="print(1+1)\n"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "ok"
    assert report["stdout"] == "2\n"
    assert report["exit_code"] == 0
    assert set(report) >= {"status", "exit_code", "stdout", "stderr", "duration_s"}


def test_exec_reports_a_timeout() -> None:
    result = runner.invoke(
        app, ["tools", "exec", "python", "--timeout-s", "0.5"], input="while True: pass\n"
    )
    assert json.loads(result.stdout)["status"] == "timeout"


def test_exec_refuses_empty_input_and_bad_limits() -> None:
    empty = runner.invoke(app, ["tools", "exec", "python"], input="  \n")
    assert empty.exit_code != 0
    assert "no code on stdin" in str(empty.exception)
    bad = runner.invoke(app, ["tools", "exec", "python", "--timeout-s", "-1"], input="print(1)")
    assert "timeout_s must be > 0" in str(bad.exception)
