"""``heddle bench predictor``: Fig. 13 redone, per zoo family and text signal strength.

Per cell (family, signal): one parameter draw of the family; a training trace (epoch 0) and a
test trace of the same prompts (epoch 1: new samples, as an RL run revisits its dataset), both
with the text layer at that signal. The context model trains on the training trace; the numeric
predictors (``online``, and the paper's two prompt-only baselines ``prompt_only`` and
``history``) observe it; the ``oracle`` knows the test trace; the ``text_reader``
(``heddle.bench.text_reader``) reads the numbers each text was written from: an estimate of what
reading the text can earn, beside the context model. Each then predicts the test
trajectories still running after 1, 2 and 3 steps: Pearson r of the remaining output tokens,
and long-tail recall (the top 10% by total length, ranked by generated + predicted remaining).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heddle.bench.text_reader import Quantities, TextReader
from heddle.context_model.metrics import long_tail_recall, pearson_r
from heddle.context_model.model import ContextModel
from heddle.context_model.train import REPORTED_STEPS, TrainConfig, train, train_model
from heddle.policy.prediction import Predictor, PredictorOptions, fit, make_predictor, progress_of
from heddle.policy.prediction.online import OnlinePredictor
from heddle.traces import TraceTrajectory
from heddle.workloads.text import (
    BENCH_SIGNALS,
    SIGNAL_LEVELS,
    text_kind_of,
    with_text,
    with_text_and_quantities,
)
from heddle.workloads.zoo import zoo_family

NUMERIC_PREDICTORS = ("online", "prompt_only", "history", "oracle")


@dataclass(frozen=True, slots=True)
class PredictorBenchConfig:
    families: tuple[str, ...] = ("swe", "search", "math")
    signals: tuple[str, ...] = BENCH_SIGNALS
    num_trajectories: int = 512
    """Per trace (training and test alike)."""
    max_train_examples: int = 4000
    num_epochs: int = 40
    base: str = "minilm"
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PredictorCell:
    family: str
    signal_name: str
    signal: float
    figures: dict[str, dict[str, list[float | None]]]
    """Predictor name -> {"pearson_r": [step1, 2, 3], "long_tail_recall": [...]}."""
    train_s: float
    num_train_examples: int
    best_epoch: int = 0
    """The epoch training kept (0: the numeric model's answers)."""
    win_share: float | None = None
    """``TrainReport.win_share``: how surely the best epoch beat epoch 0 on held-out data."""


@dataclass(frozen=True, slots=True)
class CellTexts:
    """A cell's training and test traces with text, and what each text was written from."""

    train: list[TraceTrajectory]
    test: list[TraceTrajectory]
    train_quantities: Quantities
    test_quantities: Quantities


def cell_texts(family: str, signal: float, config: PredictorBenchConfig) -> CellTexts:
    """The cell's training and test traces (same prompts, new samples), with text."""
    zoo = zoo_family(family)
    params = zoo.draw(random.Random(config.seed))
    kind = text_kind_of(family)
    train, train_quantities = with_text_and_quantities(
        zoo.generate(params, config.num_trajectories, seed=config.seed, epoch=0),
        kind,
        signal,
        config.seed,
    )
    test, test_quantities = with_text_and_quantities(
        zoo.generate(params, config.num_trajectories, seed=config.seed, epoch=1),
        kind,
        signal,
        config.seed + 1,
    )
    return CellTexts(train, test, train_quantities, test_quantities)


def predictor_cell_traces(
    family: str, signal: float, config: PredictorBenchConfig
) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
    """``cell_texts``' two traces."""
    texts = cell_texts(family, signal, config)
    return texts.train, texts.test


def _figures(
    test_trace: Sequence[TraceTrajectory], guess_at: dict[int, list[float]]
) -> dict[str, list[float | None]]:
    correlations: list[float | None] = []
    recalls: list[float | None] = []
    for num_steps in REPORTED_STEPS:
        live = [t for t in test_trace if len(t.steps) > num_steps]
        truth = [float(sum(s.output_tokens for s in t.steps[num_steps:])) for t in live]
        done = [float(sum(s.output_tokens for s in t.steps[:num_steps])) for t in live]
        guesses = guess_at[num_steps]
        r = pearson_r(truth, guesses)
        recall = long_tail_recall(np.add(done, truth).tolist(), np.add(done, guesses).tolist())
        correlations.append(None if np.isnan(r) else round(r, 4))
        recalls.append(None if np.isnan(recall) else round(recall, 4))
    return {"pearson_r": correlations, "long_tail_recall": recalls}


def _numeric_guesses(
    predictor: Predictor, test_trace: Sequence[TraceTrajectory]
) -> dict[int, list[float]]:
    return {
        k: [predictor.predict(progress_of(t, k)) for t in test_trace if len(t.steps) > k]
        for k in REPORTED_STEPS
    }


def _context_guesses(
    model: ContextModel, online: OnlinePredictor, test_trace: Sequence[TraceTrajectory]
) -> dict[int, list[float]]:
    """The context model's answers, each correcting ``online``'s answer for the same step."""
    guesses = {}
    for k in REPORTED_STEPS:
        progresses = [progress_of(t, k) for t in test_trace if len(t.steps) > k]
        baselines = [(online.predict(p), online.predict_tool_s(p)) for p in progresses]
        guesses[k] = model.predict(progresses, baselines)[:, 0].tolist()
    return guesses


def _reader_guesses(
    reader: TextReader,
    online: OnlinePredictor,
    test_trace: Sequence[TraceTrajectory],
    quantities: Quantities,
) -> dict[int, list[float]]:
    """The text reader's answers, each from the numbers of the texts read and ``online``'s
    answer for the same step."""
    return {
        k: [
            reader.predict(online.predict(progress_of(t, k)), quantities[t.id], k)
            for t in test_trace
            if len(t.steps) > k
        ]
        for k in REPORTED_STEPS
    }


def run_predictor_cell(
    family: str, signal_name: str, config: PredictorBenchConfig, folder: Path
) -> PredictorCell:
    signal = SIGNAL_LEVELS[signal_name]
    texts = cell_texts(family, signal, config)
    train_trace, test_trace = texts.train, texts.test
    train_config = TrainConfig(
        base=config.base,
        num_epochs=config.num_epochs,
        max_examples=config.max_train_examples,
        seed=config.seed,
    )
    report, model = train_model(train_trace, folder / f"{family}-{signal_name}", train_config)
    online = OnlinePredictor()
    for trajectory in train_trace:
        online.observe_trace(trajectory)
    figures = {
        "context": _figures(test_trace, _context_guesses(model, online, test_trace)),
        "online": _figures(test_trace, _numeric_guesses(online, test_trace)),
    }
    truth = {t.id: t for t in test_trace}
    for name in NUMERIC_PREDICTORS[1:]:
        predictor = make_predictor(name, PredictorOptions(trace=truth, seed=config.seed))
        if name != "oracle":
            fit(predictor, train_trace)
        figures[name] = _figures(test_trace, _numeric_guesses(predictor, test_trace))
    reader = TextReader.fit(train_trace, texts.train_quantities, REPORTED_STEPS)
    figures["text_reader"] = _figures(
        test_trace, _reader_guesses(reader, online, test_trace, texts.test_quantities)
    )
    return PredictorCell(
        family,
        signal_name,
        signal,
        figures,
        report.train_s,
        report.num_train_examples,
        report.best_epoch,
        report.win_share,
    )


def time_training(
    num_examples: int, config: PredictorBenchConfig, folder: Path
) -> tuple[float, int]:
    """Wall seconds to train on ``num_examples`` (swe at strong signal), and how many it had."""
    family = config.families[0]
    zoo = zoo_family(family)
    params = zoo.draw(random.Random(config.seed))
    trace: list[TraceTrajectory] = []
    epoch = 0
    while sum(max(0, len(t.steps) - 1) for t in trace) < num_examples and epoch < 50:
        trace.extend(zoo.generate(params, config.num_trajectories, seed=config.seed, epoch=epoch))
        epoch += 1
    # ids repeat across epochs: prefix them so each trajectory stays one
    trace = [
        TraceTrajectory(
            id=f"{i}:{t.id}", group=t.group, prompt_tokens=t.prompt_tokens, steps=t.steps
        )
        for i, t in enumerate(trace)
    ]
    texted = with_text(trace, text_kind_of(family), SIGNAL_LEVELS["strong"], config.seed)
    started = time.perf_counter()
    report = train(
        texted,
        folder / "timing",
        TrainConfig(base=config.base, num_epochs=config.num_epochs, max_examples=num_examples),
    )
    return time.perf_counter() - started, report.num_examples
