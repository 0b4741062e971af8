"""`heddle replay ROLLOUT --timeline --what-if`: a rollout recorded in a data dir's stream (by the
simulator, published to the embedded server) is drawn and re-simulated from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bus import Bus
from heddle.cli.apps import app
from heddle.config import Settings

from .test_resimulate import TP_DEGREES, recorded_run, trace


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    run = recorded_run("slime", trace(24))
    async with Bus(Settings(data_dir=tmp_path)) as bus:
        await bus.publish_many(run.events)
    return tmp_path


def test_timeline_and_what_if_of_a_recorded_rollout(data_dir: Path) -> None:
    png = data_dir / "plots" / "sim.png"
    args = ["--data-dir", str(data_dir), "replay", "sim", "--timeline", str(png),
            "--what-if", "heddle,verl", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["timeline"] == str(png) and png.read_bytes()[:4] == b"\x89PNG"
    report = document["what_if"]
    assert report["recorded"]["policy"] == "slime"
    assert list(report["simulated"]) == ["slime", "heddle", "verl"]
    assert report["cluster"]["tp_degrees"] == TP_DEGREES
    assert report["simulated_over_recorded"] == pytest.approx(1.0)

    table = CliRunner().invoke(app, ["--data-dir", str(data_dir), "replay", "sim",
                                     "--what-if", "verl"])  # fmt: skip
    assert table.exit_code == 0, table.output
    assert "simulated verl" in table.output and "recorded (slime)" in table.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "--timeline", "x.png"], "need a ROLLOUT_ID"),
        (["replay", "sim", "--what-if", "nope"], "--what-if names policies"),
        (["replay", "ghost", "--what-if", "verl"], "no rollout 'ghost'"),
    ],
)
def test_bad_requests_are_user_errors(data_dir: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), *args])
    assert result.exit_code != 0
    assert message in str(result.exception)
