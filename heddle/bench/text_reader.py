"""The text reader of ``heddle bench predictor``: an estimate of what reading the synthetic text
can earn.

``heddle.workloads.text`` writes every text from one number ``z`` (``signal`` parts truth, the rest
noise), so no reader of the words knows more about the work to come than the ``z`` of the texts
it has read. The text reader is handed those numbers exactly (``with_text_and_quantities``)
and fits, on the training trace by least squares, ``log1p`` of the remaining output tokens on four
features: a constant, the log of the online model's answer (cross-fitted, as the context model's
training baselines are: ``heddle.context_model.examples.cross_fitted_baselines``), the mean of the
``z`` read so far and the latest one, pooled over the step counts it is fitted at. Its answer is
``exp(fit)`` times the mean of ``exp(residual)`` (the smearing correction), less one, at least 0.

Set beside the context model, whose encoder must recover ``z`` from the words: where the two are
level, a better encoder earns little on this text; where the reader is well ahead, the encoder
loses what the text holds. An estimate, not a bound: a reader that used the numbers otherwise
(not linearly, or per step count) could rank higher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from heddle.context_model.examples import cross_fitted_baselines
from heddle.traces import TraceTrajectory
from heddle.workloads.text import StepQuantities

Quantities = Mapping[str, Sequence[StepQuantities]]
"""What ``with_text_and_quantities`` reports of a trace: per trajectory id, per step, the
texts' ``z``."""


def read_after(quantities: Sequence[StepQuantities], num_steps: int) -> list[float]:
    """The ``z`` of the texts a prediction after ``num_steps`` generations has read, oldest
    first: each generation's output and the tool results before the last generation (the last
    one's tool call is still running, ``progress_of``)."""
    if num_steps < 1:
        raise ValueError(f"the text reader reads after >= 1 step, got {num_steps}")
    read: list[float] = []
    returned: float | None = None  # the previous step's tool result
    for output_z, tool_z in quantities[:num_steps]:
        if returned is not None:
            read.append(returned)
        read.append(output_z)
        returned = tool_z
    return read


@dataclass(frozen=True, slots=True)
class TextReader:
    """The fitted reader (``fit``), answering for one trajectory at a time (``predict``)."""

    coefficients: tuple[float, ...]
    """Intercept, log online answer, mean ``z`` read, latest ``z`` read."""
    smearing: float
    """Mean of ``exp(residual)`` over the fit's samples."""

    @classmethod
    def fit(
        cls, trace: Sequence[TraceTrajectory], quantities: Quantities, steps: Sequence[int]
    ) -> TextReader:
        """Least squares over every (trajectory, step count in ``steps``) of ``trace`` still
        running; ``ValueError`` for a step count below 1 or when no trajectory runs."""
        if any(num_steps < 1 for num_steps in steps):
            raise ValueError(f"the text reader reads after >= 1 step, got steps {list(steps)}")
        baselines = cross_fitted_baselines(trace)
        rows: list[list[float]] = []
        targets: list[float] = []
        for trajectory in trace:
            for num_steps in steps:
                if len(trajectory.steps) > num_steps:
                    answer = baselines[(trajectory.id, num_steps)][0]
                    rows.append(_features(answer, quantities[trajectory.id], num_steps))
                    remaining = sum(s.output_tokens for s in trajectory.steps[num_steps:])
                    targets.append(math.log1p(remaining))
        if not rows:
            raise ValueError("no running trajectory to fit the text reader on")
        features, logs = np.asarray(rows), np.asarray(targets)
        coefficients, *_ = np.linalg.lstsq(features, logs, rcond=None)
        smearing = float(np.mean(np.exp(logs - features @ coefficients)))
        return cls(tuple(float(c) for c in coefficients), smearing)

    def predict(
        self, online_answer: float, quantities: Sequence[StepQuantities], num_steps: int
    ) -> float:
        """Remaining output tokens after ``num_steps`` generations of a trajectory whose texts
        were written from ``quantities``, where the online model answers ``online_answer``."""
        features = _features(online_answer, quantities, num_steps)
        log_remaining = float(np.dot(features, self.coefficients))
        return max(0.0, math.exp(log_remaining) * self.smearing - 1.0)


def _features(
    online_answer: float, quantities: Sequence[StepQuantities], num_steps: int
) -> list[float]:
    read = read_after(quantities, num_steps)
    return [1.0, math.log(max(1.0, online_answer)), sum(read) / len(read), read[-1]]
