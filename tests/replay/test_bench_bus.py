"""`heddle bench bus` end to end, then `heddle replay --verify` on the same data dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from heddle.bus.embedded import RECORD_NAME
from heddle.cli import app


def test_bench_then_verify(tmp_path: Path) -> None:
    runner = CliRunner()
    bench = runner.invoke(
        app,
        [
            "--data-dir",
            str(tmp_path),
            "bench",
            "bus",
            "--events",
            "400",
            "--trajectories",
            "20",
            "--tokens",
            "64",
            "--batch-size",
            "100",
            "--json",
        ],
    )
    assert bench.exit_code == 0, bench.stdout
    figures = json.loads(bench.stdout)
    # Each step's generation and its announcement; each trajectory's submission and placement.
    num_events = 2 * 400 + 2 * 20 + 1
    for phase in ("publish", "raw_pull", "projection", "replay", "replay_lean", "publish_encoded"):
        assert figures["phases"][phase]["events"] == num_events, phase
        assert figures["phases"][phase]["server_cpu_us_per_event"] is not None
    assert figures["projection_to_raw"] > 0
    if "nats_bench_pub_msgs_s" in figures:  # natscli installed: the same server's limit
        assert figures["nats_bench_pub_msgs_s"] > 0 and figures["nats_bench_consume_msgs_s"] > 0
        assert figures["publish_to_nats_bench"] > 0 and figures["replay_to_nats_bench"] > 0
        assert figures["publish_encoded_to_nats_bench"] > 0
    else:
        assert os.environ.get("HEDDLE_REQUIRE_NATS_CLI") != "1", figures["nats_bench"]
        assert figures["nats_bench"].startswith("skipped")
    assert not (tmp_path / RECORD_NAME).exists()
    assert list((tmp_path / "bench").iterdir()) == []

    # Replay never writes the live ledger: the projector fills it first.
    project = runner.invoke(app, ["--data-dir", str(tmp_path), "db", "project", "--until-idle"])
    assert project.exit_code == 0, project.stdout
    verify = runner.invoke(app, ["--data-dir", str(tmp_path), "replay", "--verify", "--json"])
    report = json.loads(verify.stdout)
    assert verify.exit_code == 0
    # Two rollouts: the measured one and the pre-encoded publish's.
    assert report["consistent"] is True and report["events"] == 2 * num_events
    assert report["sequence"] == 2 * num_events and report["unprojected_messages"] == 0
    assert report["rows_compared"]["steps"] == 2 * 400
