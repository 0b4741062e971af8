"""`heddle bench control` at a small size: the control plane decides a live workload played by
the bench and the report holds what docs/benchmarks.md quotes from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import heddle.cli  # noqa: F401  (registers the commands on the app)
from heddle.cli.apps import app


@pytest.mark.slow
def test_bench_control_reports_decision_latency_and_throughput(tmp_path: Path) -> None:
    args = ["--data-dir", str(tmp_path), "bench", "control", "--trajectories", "64"]
    args += ["--workers", "2", "--step-s", "1", "--duration-s", "12", "--warmup-s", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["num_trajectories"] == 64 and report["num_workers"] == 2
    assert report["num_samples"] > 0 and report["events_per_s"] > 0
    assert 0 < report["p50_ms"] <= report["p90_ms"] <= report["p99_ms"] <= report["max_ms"]
    assert report["initial_placement_s"] is not None
    decided = {slot["slot"]: slot["num_decided"] for slot in report["slots"]}
    # The router's two stages: its placement deciders first, then the others.
    assert {"placement", "prediction+reshard+priority+transfer+rollout"} <= set(decided)
    assert decided["placement"] >= 64  # every trajectory was placed at least once
    assert all(slot["num_rejected"] == 0 for slot in report["slots"])
    # the run had a data dir of its own, removed after it: only the logs stay in the user's
    assert [path.name for path in tmp_path.iterdir()] == ["logs"]
