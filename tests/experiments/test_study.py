"""The policy study (``python -m heddle.experiments.study``): the runs it plans and the tables it
prints."""

from __future__ import annotations

import pytest

from heddle.experiments.study import Setting, main, plan


def test_systems_without_predictions_run_once_per_setting() -> None:
    settings = [Setting("coding", 16, "qwen3-8b", 2)]
    runs = plan(settings, ["heddle", "verl"], ["oracle", "noisy_oracle"])
    assert [(system, predictor) for _, system, predictor in runs] == [
        ("heddle", "oracle"),
        ("heddle", "noisy_oracle"),
        ("verl", "oracle"),
    ]


def test_a_small_study_prints_one_table_row_per_system(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--settings", "math:16:qwen3-8b", "--gpus", "2", "--systems", "heddle,verl,slime"]
    assert main([*argv, "--predictors", "oracle,noisy_oracle"]) == 0
    out = capsys.readouterr().out
    rows = [
        line
        for line in out.splitlines()
        if line.startswith("| heddle") or line.startswith("| verl")
    ]
    assert len(rows) == 2
    heddle_cells = rows[0].split(" | ")
    assert len(heddle_cells) == 3  # system, then one cell per predictor
    verl_over_verl = rows[1].split(" | ")[1].split(" / ")[1]
    assert verl_over_verl == "1.00"
