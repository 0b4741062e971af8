"""`heddle bench predictor` end to end on the tiny encoder (the figures' shape, not their size)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from heddle.cli import app


def test_bench_prints_the_issue_s_shape(tiny_encoder: Path) -> None:
    args = [
        "bench",
        "predictor",
        "--families",
        "search",
        "--signals",
        "none,strong",
        "--num-trajectories",
        "32",
        "--max-train-examples",
        "200",
        "--num-timing-examples",
        "100",
        "--concurrency",
        "4",
        "--num-epochs",
        "2",
        "--base",
        str(tiny_encoder),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output.strip().splitlines()[-1])  # after the progress lines
    assert set(figures["families"]) == {"search@none", "search@strong"}
    cell = figures["families"]["search@strong"]
    assert cell["signal"] == 0.9
    assert set(cell["predictors"]) == {
        "context",
        "online",
        "prompt_only",
        "history",
        "oracle",
        "text_reader",
    }
    assert len(cell["predictors"]["context"]["pearson_r"]) == 3
    assert cell["predictors"]["oracle"]["long_tail_recall"][0] == 1.0
    serve = figures["serve"]
    assert serve["p99_ms"] >= serve["p50_ms"] > 0 and 0 <= serve["on_time_share"] <= 1
    assert figures["train_s"] > 0 and figures["train_examples"] >= 100


def test_bad_family_is_a_user_error() -> None:
    result = CliRunner().invoke(app, ["bench", "predictor", "--families", "chess"])
    assert result.exit_code != 0
    assert "unknown families" in str(result.exception) + result.output
