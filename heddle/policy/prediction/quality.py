"""The paper's predictor metrics (s.7.2): Pearson correlation and recall of the long tail."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.prediction.base import Predictor, Progress
from heddle.traces import TraceTrajectory


def progress_of(trajectory: TraceTrajectory, num_steps: int) -> Progress:
    """The progress of a trace trajectory as a live prediction sees it after ``num_steps``
    generations: at the tool call of the last one, so with ``returned_tool_calls(num_steps)``
    tool results (the control plane predicts while that call runs, paper s.4.1)."""
    progress = Progress(trajectory.id, trajectory.group, trajectory.prompt_tokens)
    for index, step in enumerate(trajectory.steps[:num_steps]):
        if index:
            previous = trajectory.steps[index - 1]
            progress = progress.after_tool(
                previous.tool_output_tokens, previous.tool_s, previous.tool_text
            )
        progress = progress.after_generation(step.output_tokens, step.output_text)
    return progress


@dataclass(frozen=True, slots=True)
class PredictionQuality:
    """The paper's predictor metrics (s.7.2) after a given number of steps."""

    pearson: float
    """Correlation of predicted and true remaining output (nan when either is constant)."""
    tail_recall: float
    """Share of the truly longest ``tail_fraction`` that the prediction also ranks there."""
    num_trajectories: int


def prediction_quality(
    predictor: Predictor,
    trajectories: Sequence[TraceTrajectory],
    num_steps: int = 0,
    tail_fraction: float = 0.1,
) -> PredictionQuality:
    """Score a predictor on trajectories still running after ``num_steps`` steps."""
    if not 0 < tail_fraction <= 1:
        raise ValueError(f"tail_fraction must be in (0, 1], got {tail_fraction}")
    live = [t for t in trajectories if len(t.steps) > num_steps]
    truth = [float(sum(s.output_tokens for s in t.steps[num_steps:])) for t in live]
    guess = [predictor.predict(progress_of(t, num_steps)) for t in live]
    if not live:
        return PredictionQuality(math.nan, math.nan, 0)
    tail = max(1, round(tail_fraction * len(live)))
    true_tail = set(sorted(range(len(live)), key=lambda i: -truth[i])[:tail])
    guessed_tail = set(sorted(range(len(live)), key=lambda i: -guess[i])[:tail])
    return PredictionQuality(
        _pearson(truth, guess), len(true_tail & guessed_tail) / tail, len(live)
    )


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    var_x = sum((x - mean_x) ** 2 for x in xs)
    var_y = sum((y - mean_y) ** 2 for y in ys)
    if var_x <= 0 or var_y <= 0:
        return math.nan
    return cov / math.sqrt(var_x * var_y)
