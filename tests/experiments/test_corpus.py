"""The regression corpus: entries written and read back, run by the sweep beside the zoo (their
own split and history; the stored traces as replication 0), the hunter's confirmed losses added
once, and bad entries named."""

from __future__ import annotations

import random
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from heddle.experiments.corpus import (
    CELL_FILE,
    CORPUS_DIR,
    HISTORY_FILE,
    TRACE_FILE,
    CorpusEntryError,
    read_corpus,
    read_entry,
    write_entry,
)
from heddle.experiments.hunt import HuntFinding
from heddle.experiments.hunt_corpus import add_to_corpus, confirmed_losses, entry_name, point_of
from heddle.experiments.hunt_report import finding_record
from heddle.experiments.hunt_space import HuntPoint, draw_point, hunt_seed
from heddle.experiments.kv_pressure import KvPressure
from heddle.experiments.sweep import CellResult, SweepConfig, cell_traces, run_sweep, sweep_cells
from heddle.experiments.sweep_summary import summarise_sweep
from heddle.traces import read_trace

MAX_STEPS = 60


def _point(index: int, history: str = "other") -> HuntPoint:
    seed = hunt_seed(9, index)
    point = draw_point(random.Random(seed), seed)
    return replace(point, history=history, model="qwen3-8b", num_gpus=8)  # type: ignore[arg-type]


def _write(directory: Path, index: int, history: str = "other") -> HuntPoint:
    point = _point(index, history)
    cell = point.cell(index, MAX_STEPS)
    traces = point.source(MAX_STEPS).traces(cell, 0)
    write_entry(directory, entry_name(point), point, cell.num_gpus, traces, {"by": "a test"})
    return point


def test_an_entry_reads_back_with_its_traces_and_history(tmp_path: Path) -> None:
    point = _write(tmp_path, 0)
    (entry,) = read_corpus(tmp_path)
    assert entry.name == entry_name(point) and entry.name.startswith("wide-")
    assert (entry.params, entry.seed, entry.history) == (point.params, point.seed, "other")
    assert (entry.model, entry.num_gpus, entry.kv_ratio) == ("qwen3-8b", 8, point.kv_ratio)
    assert entry.found == {"by": "a test"}
    folder = tmp_path / entry.name
    assert {p.name for p in folder.iterdir()} == {CELL_FILE, TRACE_FILE, HISTORY_FILE}
    trace, history = point.source(MAX_STEPS).traces(point.cell(0, MAX_STEPS), 0)
    assert read_trace(folder / TRACE_FILE) == trace and entry.num_trajectories == len(trace)
    assert read_trace(folder / HISTORY_FILE) == history
    none = _write(tmp_path, 1, "none")
    assert not (tmp_path / entry_name(none) / HISTORY_FILE).exists()


def test_the_sweep_runs_corpus_cells_with_their_own_history(tmp_path: Path) -> None:
    first, second = _write(tmp_path, 0, "same"), _write(tmp_path, 1, "none")
    config = SweepConfig(
        families=("math",),
        models=("qwen3-8b",),
        gpu_counts=(4,),
        num_cells=1,
        num_heldout_cells=1,
        histories=("other", "same"),
        corpus_dir=str(tmp_path),
        systems=("heddle", "verl"),
        steps_per_cell=20,
        min_trajectories=8,
        max_trajectories=16,
    )
    cells = sweep_cells(config)
    corpus = [c for c in cells if c.split == "corpus"]
    assert [c.index for c in cells if c.split != "corpus"] == [0, 0, 1, 1]
    names = sorted((entry_name(p), p.history) for p in (first, second))
    assert [(c.family, c.history) for c in corpus] == names
    assert [c.index for c in corpus] == [2, 3]
    cell = next(c for c in corpus if c.history == "same")
    stored = read_trace(tmp_path / cell.family / TRACE_FILE)
    trace, history = cell_traces(cell, config)
    assert trace == stored and history == read_trace(tmp_path / cell.family / HISTORY_FILE)
    later, _ = cell_traces(cell, config, replication=1)
    assert [t.group for t in later] == [t.group for t in stored] and later != stored
    results = run_sweep(replace(config, split="corpus"), jobs=1)
    assert [r.split for r in results] == ["corpus", "corpus"]
    summary = summarise_sweep(results, "other")
    assert summary["corpus"].num_cells == 2 and summary["all"].num_cells == 0


def test_the_package_s_corpus_reads() -> None:
    for entry in read_corpus(CORPUS_DIR):
        assert entry.family == "wide" and entry.num_trajectories >= 1
        assert (Path(entry.directory) / TRACE_FILE).is_file()


def _record(index: int, search: float, confirmed: float | None) -> dict[str, Any]:
    """A cell's record as the hunt's JSON has it (``hunt_report.finding_record``)."""
    point = _point(index)
    judged = {
        "heddle_over_best_baseline": search,
        "heddle_over": {"heddle-no-sched": 1.0},
        "makespans_s": {"heddle": 100.0 * search, "verl": 100.0},
    }
    return {
        "index": index,
        "seed": point.seed,
        "model": point.model,
        "num_gpus_asked": point.num_gpus,
        "history": point.history,
        "params": asdict(point.params),
        "trajectories_per_gpu_asked": point.trajectories_per_gpu,
        "kv_ratio_target": point.kv_ratio,
        "search": judged,
        "confirmed": None
        if confirmed is None
        else {**judged, "heddle_over_best_baseline": confirmed},
    }


def test_only_confirmed_losses_go_in_worst_first_and_once(tmp_path: Path) -> None:
    document = {
        "config": {"max_steps": MAX_STEPS},
        "worst_confirmed": [
            _record(0, 1.30, 1.05),
            _record(1, 1.20, 1.15),
            _record(2, 1.40, 1.01),  # not a loss once confirmed
            _record(100, 1.2001, 1.1),  # the same finding as cell 1 (makespans within 0.5%)
        ],
    }
    document["worst_confirmed"].append(_record(3, 1.5, None))  # never confirmed
    assert [r["index"] for r in confirmed_losses(document)] == [1, 0]
    written, existing = add_to_corpus(document, tmp_path, 1, {"by": "a test"})
    assert [e.name for e in written] == [entry_name(_point(1))] and existing == []
    assert written[0].found["confirmed"]["heddle_over_best_baseline"] == 1.15
    assert written[0].found["by"] == "a test"
    written, existing = add_to_corpus(document, tmp_path, 5, {})
    assert [e.name for e in written] == [entry_name(_point(0))]
    assert existing == [entry_name(_point(1))]


def test_a_record_of_the_report_gives_back_its_point() -> None:
    point = _point(4)
    kv = KvPressure(1, 1, 1.0, 1.0, 1.0, 1.0)
    result = CellResult(point.cell(4, MAX_STEPS), "tuning", 8, 8, 1, kv, 1.0, {})
    record = finding_record(HuntFinding(4, "local", 1, point, result))
    assert point_of(record) == point


def test_a_bad_entry_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / CELL_FILE).write_text('{"family": "wide"}')
    with pytest.raises(CorpusEntryError, match="broken: not a corpus entry"):
        read_entry(tmp_path / "broken")
    (tmp_path / "broken" / CELL_FILE).write_text('{"family": "poetry"}')
    with pytest.raises(CorpusEntryError, match="family 'poetry' has no parameter record"):
        read_corpus(tmp_path)
    assert read_corpus(tmp_path / "absent") == []
