"""Training examples for the context predictor: one per step of every recorded trajectory.

An example is what a live prediction sees after ``num_steps`` generations (at the tool call of
the last one, ``heddle.policy.prediction.progress_of``): its context, as text and as numbers, and
the three things still to come: output tokens, generation steps and tool seconds
(``remaining_tool_s``: counting the call in flight). The paper (s.4.1) decomposes each recorded
trajectory into such (context, remaining length) pairs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from heddle.policy.prediction import Progress, progress_of, remaining_tool_s
from heddle.traces import TraceTrajectory

NUMERIC_FEATURES = (
    "log_baseline_remaining_tokens",
    "log_baseline_remaining_tool_s",
    "log_prompt_tokens",
    "num_steps",
    "log_output_tokens",
    "log_first_output_tokens",
    "log_last_output_tokens",
    "log_tool_output_tokens",
    "log_tool_s",
)
"""The numbers the head reads beside the text embedding (``numeric_features``)."""
TARGETS = ("remaining_output_tokens", "remaining_steps", "remaining_tool_s")


CONTEXT_PARTS = ("plan", "tool", "now")


def context_parts(progress: Progress) -> tuple[str, str, str]:
    """The texts the encoder reads, each on its own: the plan (first output), the latest tool
    result and the latest output. A small encoder reads a few hundred tokens, so the context is
    these parts rather than the whole history (the paper's strongest early signal is the plan);
    encoded apart, a part shared by several steps (the plan by all) is embedded once."""
    return (progress.first_output_text, progress.last_tool_text, progress.last_output_text)


Baseline = tuple[float, float]
"""The numeric model's prediction of the same step: remaining output tokens and tool seconds."""


def numeric_features(progress: Progress, baseline: Baseline) -> list[float]:
    """``NUMERIC_FEATURES`` of a progress and the numeric model's prediction, each O(1..10).
    The head reads the numeric model's answer (it corrects it from the text rather than
    relearning what the numbers say: on text without signal it can fall back on it)."""
    return [
        math.log1p(max(0.0, baseline[0])),
        math.log1p(max(0.0, baseline[1])),
        math.log1p(progress.prompt_tokens),
        float(progress.num_steps),
        math.log1p(progress.output_tokens),
        math.log1p(progress.first_output_tokens),
        math.log1p(progress.last_output_tokens),
        math.log1p(progress.tool_output_tokens),
        math.log1p(progress.tool_s),
    ]


@dataclass(frozen=True, slots=True)
class Example:
    traj_id: str
    num_steps: int
    """Generations the context holds (the prediction's ``step`` is ``num_steps - 1``)."""
    parts: tuple[str, ...]
    """``context_parts`` of the step."""
    features: tuple[float, ...]
    output_tokens: int
    """Generated so far (with the remaining ones, the trajectory's total)."""
    remaining_output_tokens: float
    remaining_steps: float
    remaining_tool_s: float

    def targets(self) -> tuple[float, float, float]:
        return (self.remaining_output_tokens, self.remaining_steps, self.remaining_tool_s)


def examples_of(
    trajectory: TraceTrajectory, baselines: Mapping[tuple[str, int], Baseline] | None = None
) -> list[Example]:
    """One example after each generation but the last (after it nothing remains to predict);
    ``baselines`` by (trajectory id, steps): the numeric model's answers (zeros if missing)."""
    examples = []
    steps = trajectory.steps
    for num_steps in range(1, len(steps)):
        progress = progress_of(trajectory, num_steps)
        baseline = (baselines or {}).get((trajectory.id, num_steps), (0.0, 0.0))
        examples.append(
            Example(
                traj_id=trajectory.id,
                num_steps=num_steps,
                parts=context_parts(progress),
                features=tuple(numeric_features(progress, baseline)),
                output_tokens=progress.output_tokens,
                remaining_output_tokens=float(sum(s.output_tokens for s in steps[num_steps:])),
                remaining_steps=float(len(steps) - num_steps),
                remaining_tool_s=remaining_tool_s(steps, num_steps),
            )
        )
    return examples


def cross_fitted_baselines(
    trajectories: Sequence[TraceTrajectory],
) -> dict[tuple[str, int], Baseline]:
    """The online numeric model's answer at every step of every trajectory, each from a model
    that learnt from the other half of the trajectories (alternate ones: a trajectory's own
    outcome must not leak into its baseline; its siblings stay on both sides, as they are for
    a live prediction that learnt from earlier rollouts)."""
    from heddle.policy.prediction.online import OnlinePredictor

    answers: dict[tuple[str, int], Baseline] = {}
    for fold in (0, 1):
        model = OnlinePredictor()
        for index, trajectory in enumerate(trajectories):
            if index % 2 != fold:
                model.observe_trace(trajectory)
        for index, trajectory in enumerate(trajectories):
            if index % 2 != fold:
                continue
            for num_steps in range(1, len(trajectory.steps)):
                progress = progress_of(trajectory, num_steps)
                answers[(trajectory.id, num_steps)] = (
                    model.predict(progress),
                    model.predict_tool_s(progress),
                )
    return answers


def build_examples(
    trajectories: Sequence[TraceTrajectory], max_examples: int | None = None, seed: int = 0
) -> list[Example]:
    """Every trajectory's examples, with cross-fitted baselines; above ``max_examples``, a
    seeded uniform sample of them."""
    baselines = cross_fitted_baselines(trajectories)
    examples = [example for t in trajectories for example in examples_of(t, baselines)]
    if max_examples is not None and len(examples) > max_examples:
        examples = random.Random(seed).sample(examples, max_examples)
    return examples


def split_by_trajectory(
    examples: Sequence[Example], validation_share: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """Train and validation examples, no trajectory on both sides (its steps are alike)."""
    ids = sorted({e.traj_id for e in examples})
    random.Random(seed).shuffle(ids)
    held = set(ids[: max(1, round(validation_share * len(ids)))]) if len(ids) > 1 else set()
    return [e for e in examples if e.traj_id not in held], [
        e for e in examples if e.traj_id in held
    ]


def target_matrix(examples: Sequence[Example]) -> np.ndarray:
    """``log1p`` of the three targets, one row per example."""
    return np.log1p(np.array([e.targets() for e in examples], dtype=np.float64))
