"""The context model in the simulator's sweep (``heddle sim sweep --predictor context``).

Per cell, the model is the folder ``SweepConfig.predictor_model`` names (loaded once per
process), or, without one, a model trained on the cell's history: the previous epoch of the
same prompts, which the online model also learns from; never on the rollout it predicts. Every
text of the rollout is encoded once, in batches, before the first system runs; the encoder keeps
the embeddings, so the cell's systems share them and each prediction runs only the head.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path

from heddle.context_model.model import ContextModel
from heddle.context_model.train import TrainConfig, train_model
from heddle.experiments.cells import Cell
from heddle.experiments.sweep import CellResult, SweepConfig, run_cell
from heddle.policy.prediction import ContextAnswer, Progress
from heddle.traces import TraceTrajectory

log = logging.getLogger(__name__)

CELL_TRAINING = TrainConfig(num_epochs=40, max_examples=2000)
"""A cell's own model: the predictor bench's settings (``heddle bench predictor``)."""


def context_answer(model: ContextModel) -> ContextAnswer:
    """The model as the simulator asks it: one progress and the fallback's answer at a time."""

    def answer(progress: Progress, baseline: tuple[float, float]) -> tuple[float, float]:
        tokens, _, tool_s = model.predict([progress], [baseline])[0]
        return float(tokens), float(tool_s)

    return answer


@lru_cache(maxsize=2)
def _loaded(folder: str) -> ContextModel:
    return ContextModel.load(Path(folder))


def trace_texts(trace: Sequence[TraceTrajectory]) -> list[str]:
    """Every distinct text of the trace (what the predictions will read)."""
    texts = (text for t in trace for s in t.steps for text in (s.output_text, s.tool_text))
    return list(dict.fromkeys(texts))


def cell_model(
    config: SweepConfig,
    history: Sequence[TraceTrajectory],
    trace: Sequence[TraceTrajectory],
) -> ContextAnswer:
    """The cell's model (``predictor_model``'s, or trained on ``history``), with the
    rollout's texts encoded."""
    started = time.perf_counter()
    if config.predictor_model:
        model = _loaded(config.predictor_model)
    else:
        with tempfile.TemporaryDirectory(prefix="heddle-cell-model-") as folder:
            training = replace(CELL_TRAINING, seed=config.seed)
            _, model = train_model(history, Path(folder), training)
    trained = time.perf_counter()
    model.encoder.encode(trace_texts(trace))
    log.info(
        "context model: %.1f s to load or train, %.1f s to encode the rollout's texts",
        trained - started,
        time.perf_counter() - trained,
    )
    return context_answer(model)


def run_context_cell(cell: Cell, config: SweepConfig) -> CellResult:
    """``run_cell`` with the context model (a module-level function: worker processes run it);
    torch on one thread, as each worker process is one of the sweep's jobs."""
    import torch

    torch.set_num_threads(1)
    return run_cell(cell, config, context=partial(cell_model, config))
