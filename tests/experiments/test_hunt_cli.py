"""`heddle sim hunt`: one JSON object with its budget, wall time and worst cells, progress on
stderr, the corpus filled from a hunt's JSON; one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.cli import app
from heddle.errors import UserError
from heddle.experiments.corpus import read_corpus

TINY = ["--budget", "2", "--max-steps", "30", "--confirm", "2", "--confirm-replications", "2"]
TINY += ["--systems", "heddle,verl,heddle-no-sched", "--jobs", "1"]


def test_a_hunt_prints_its_budget_wall_time_and_worst_cells(tmp_path: Path) -> None:
    markdown = tmp_path / "hunt.md"
    result = CliRunner().invoke(app, ["sim", "hunt", *TINY, "--json", "--markdown", str(markdown)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["budget"] == 2 and document["wall_s"] > 0
    # Two cells, both confirmed unless the mutation ran the same finding again.
    assert document["num_cells"] == 2 and document["num_confirmed"] in (1, 2)
    assert "random cell 0" in result.stderr and "confirm cell" in result.stderr
    headline = document["worst"]["heddle_over_best_baseline"]
    assert headline["value"] > 0 and headline["against"] == "verl"
    assert document["worst"]["heddle_over_best_ablation"]["against"] == "heddle-no-sched"
    worst = document["worst_vs_baseline"][0]
    assert {"params", "search", "confirmed", "seed", "history"} <= set(worst)
    assert markdown.read_text().startswith("# Hunt: budget 2")
    (tmp_path / "hunt.json").write_text(result.stdout)
    _fill_corpus(tmp_path, document)


def _fill_corpus(tmp_path: Path, document: dict) -> None:  # type: ignore[type-arg]
    """Add every confirmed cell of the hunt, made a loss by hand (the tiny cells tie)."""
    for record in document["worst_confirmed"]:
        record["confirmed"]["heddle_over_best_baseline"] = 1.5
    source = tmp_path / "lost.json"
    source.write_text(json.dumps(document))
    corpus = tmp_path / "corpus"
    args = ["sim", "hunt", "--from-json", str(source), "--add-to-corpus", "1"]
    result = CliRunner().invoke(app, [*args, "--corpus-dir", str(corpus)])
    assert result.exit_code == 0, result.output
    assert "corpus: added wide-" in result.stderr
    (entry,) = read_corpus(corpus)
    assert entry.found["search"] and entry.found["by"] == (
        "heddle sim hunt --budget 2 --seed 0 --max-steps 30 --confirm 2 --confirm-replications 2"
    )
    again = CliRunner().invoke(app, [*args, "--corpus-dir", str(corpus)])
    assert "is there already" in again.stderr and len(read_corpus(corpus)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "0"], "budget, round_size and num_parents must be >= 1"),
        (["--systems", "heddle,heddle-no-sched"], "needs heddle and at least one baseline"),
        (["--systems", "heddle,nope"], "unknown system 'nope'"),
        (["--engine-model", "trt"], "unknown --engine-model 'trt'"),
        (["--predictor", "context"], "--predictor: choose one of"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--confirm-replications", "0"], "confirm_replications >= 1"),
        (["--from-json", "/nonexistent.json"], "not a hunt's JSON"),
    ],
)
def test_bad_flags_are_user_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "hunt", *args])
    assert isinstance(result.exception, UserError)
    assert message in str(result.exception)
