"""`heddle sim sweep`: one JSON object, a markdown report and a figure; one-line errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.cli import app
from heddle.errors import UserError
from heddle.experiments.corpus import write_entry
from heddle.experiments.hunt_corpus import entry_name
from heddle.experiments.hunt_space import draw_point, hunt_seed

HEDDLE = [sys.executable, "-c", "from heddle.cli import main; main()"]
TINY = ["--families", "math", "--models", "8b", "--gpus", "4", "--cells", "2"]
TINY += ["--systems", "heddle,verl", "--steps-per-cell", "20", "--jobs", "1"]
TINY += ["--heldout-cells", "0", "--no-corpus"]


def test_sweep_writes_json_markdown_and_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    markdown, figure = tmp_path / "sweep.md", tmp_path / "sweep.png"
    args = [*TINY, "--json", "--markdown", str(markdown), "--figure", str(figure)]
    result = CliRunner().invoke(app, ["sim", "sweep", *args])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["config"]["families"] == ["math"]
    assert document["config"]["predictor"] == "online"
    assert document["config"]["engine_model"] == "sglang"
    assert len(document["cells"]) == 2
    assert set(document["cells"][0]["runs"]) == {"heddle", "verl"}
    assert document["summary"]["all"]["num_cells"] == 2
    assert markdown.read_text().startswith("# Zoo sweep")
    assert figure.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--families", "poetry"], "--families: unknown 'poetry'"),
        (["--families", ""], "--families is empty"),
        (["--split", "test"], "unknown --split 'test'"),
        (["--cells", "0"], "--cells and --steps-per-cell must be >= 1"),
        (["--gpus", "eight"], "--gpus: cannot read 'eight'"),
        (["--kv-ratios", "-1"], "--kv-ratios must be > 0"),
        (["--models", "70b"], "unknown --model '70b'"),
        (["--systems", "heddle,nope"], "unknown system 'nope'"),
        (["--engine-model", "trt"], "unknown --engine-model 'trt'"),
        (["--predictor", "psychic"], "unknown --predictor 'psychic'"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--replications", "0"], "--replications must be >= 1, got 0"),
        (["--plans", "--replications", "2"], "--replications is for the systems' sweep"),
        (["--seed", "-1"], "the base seed must be >= 0"),
        (["--cells", "20000"], "num_cells must be in [0, 10000], got 20000"),
        (["--heldout-cells", "-1"], "--heldout-cells must be >= 0"),
        (["--histories", "yesterday"], "--histories: cannot read 'yesterday'"),
        (["--corpus-dir", "/nonexistent"], "--corpus-dir /nonexistent: not a folder"),
        (["--predictor", "context", "--histories", "none"], "drop none from --histories"),
        (["--text-signal", "loud"], "--text-signal: cannot read 'loud'"),
        (["--text-signal", "1.5"], "--text-signal must be in [0, 1]"),
        (["--predictor-latency-ms", "-1"], "--predictor-latency-ms must be >= 0"),
        (["--predictor-model", "/nonexistent"], "not a model folder"),
    ],
)
def test_bad_flags_are_user_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "sweep", *args])
    assert isinstance(result.exception, UserError)
    assert message in str(result.exception)


def test_a_bad_flag_exits_2_with_one_line() -> None:
    result = subprocess.run(
        [*HEDDLE, "sim", "sweep", "--split", "test"], capture_output=True, text=True
    )
    assert result.returncode == 2
    expected = "error: unknown --split 'test'; choose one of tuning, heldout, corpus, all"
    assert result.stderr.strip() == expected


def test_the_text_signal_and_latency_reach_the_sweep_s_config() -> None:
    args = [*TINY, "--text-signal", "none", "--predictor-latency-ms", "250", "--json"]
    result = CliRunner().invoke(app, ["sim", "sweep", *args])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert (config["text_signal"], config["predictor_latency_ms"]) == (0.0, 250.0)


def test_heldout_cells_and_both_histories_are_reported() -> None:
    args = [*TINY[:-3], "--cells", "1", "--heldout-cells", "1", "--no-corpus"]
    args += ["--histories", "other,same", "--json"]
    result = CliRunner().invoke(app, ["sim", "sweep", *args])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["config"]["histories"] == ["other", "same"]
    cells = [(c["cell"]["index"], c["split"], c["cell"]["history"]) for c in document["cells"]]
    assert cells == [
        (0, "tuning", "other"),
        (0, "tuning", "same"),
        (1, "heldout", "other"),
        (1, "heldout", "same"),
    ]
    for summary in document["summary_by_history"].values():
        assert (summary["tuning"]["num_cells"], summary["heldout"]["num_cells"]) == (1, 1)


def test_replications_run_the_zoo_and_the_corpus_beside_it(tmp_path: Path) -> None:
    seed = hunt_seed(7, 0)
    point = replace(draw_point(random.Random(seed), seed), model="qwen3-8b", num_gpus=4)
    cell = point.cell(0, 40)
    traces = point.source(40).traces(cell, 0)
    write_entry(tmp_path, entry_name(point), point, cell.num_gpus, traces, {"by": "a test"})
    args = [*TINY[:-1], "--cells", "1", "--replications", "3", "--corpus-dir", str(tmp_path)]
    result = CliRunner().invoke(app, ["sim", "sweep", *args, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [c["split"] for c in document["cells"]] == ["tuning", "corpus"]
    corpus = document["cells"][1]
    assert corpus["cell"]["family"] == entry_name(point)
    assert {len(run["makespans_s"]) for run in corpus["runs"].values()} == {3}
    assert document["summary"]["corpus"]["num_cells"] == 1
    assert document["summary"]["all"]["num_cells"] == 1  # the corpus is never in all
