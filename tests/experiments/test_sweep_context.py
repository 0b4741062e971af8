"""The context model in the sweep: a model folder or one trained on the cell's history (never
on the rollout), the rollout's texts encoded before the systems run, and the cell's run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import heddle.experiments.sweep_context as sweep_context
from heddle.context_model.model import ContextModel
from heddle.context_model.train import TrainConfig
from heddle.experiments.sweep import SweepConfig, cell_traces, sweep_cells
from heddle.policy.prediction import progress_of

CONFIG = SweepConfig(
    families=("search",),
    models=("qwen3-8b",),
    gpu_counts=(4,),
    kv_ratios=(2.0,),
    num_cells=1,
    systems=("heddle", "verl"),
    predictor="context",
    text_signal=0.9,
    steps_per_cell=40,
    min_trajectories=16,
    max_trajectories=24,
    num_heldout_cells=0,
    with_corpus=False,
)


def test_a_model_folder_answers_with_the_rollout_s_texts_encoded(tiny_model: Path) -> None:
    config = replace(CONFIG, predictor_model=str(tiny_model))
    trace, history = cell_traces(sweep_cells(config)[0], config)
    answer = sweep_context.cell_model(config, history, trace)
    model = sweep_context._loaded(str(tiny_model))
    assert set(sweep_context.trace_texts(trace)) <= set(model.encoder._memo)
    progress = progress_of(trace[0], 1)
    expected = ContextModel.load(tiny_model).predict([progress], [(300.0, 4.0)])[0]
    assert answer(progress, (300.0, 4.0)) == pytest.approx((expected[0], expected[2]), rel=1e-5)


def test_without_a_folder_the_cell_s_model_trains_on_its_history_only(
    tiny_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained_on: list[list[str]] = []
    real_train = sweep_context.train_model

    def recording_train(trajectories, out, config):  # type: ignore[no-untyped-def]
        trained_on.append([t.steps[0].output_text for t in trajectories])
        return real_train(trajectories, out, config)

    tiny = TrainConfig(base=str(tiny_encoder), num_epochs=2, hidden=16)
    monkeypatch.setattr(sweep_context, "CELL_TRAINING", tiny)
    monkeypatch.setattr(sweep_context, "train_model", recording_train)
    cell = sweep_cells(CONFIG)[0]
    trace, history = cell_traces(cell, CONFIG)
    result = sweep_context.run_context_cell(cell, CONFIG)
    assert trained_on == [[t.steps[0].output_text for t in history]]
    assert trained_on[0] != [t.steps[0].output_text for t in trace]
    assert result.errors == {} and set(result.runs) == {"heddle", "verl"}
