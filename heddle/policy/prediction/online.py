"""An online regression predictor of a trajectory's remaining output and tool time, learnt while
rollouts run.

The paper (s.4.1) fine-tunes a small LM on (context so far, remaining length) tuples decomposed
from historical trajectories and re-predicts after every step. This is the cheap stand-in a live
control plane can refit at every completion: two ridge regressions, of ``log1p(remaining
tokens)`` and of ``log1p(remaining tool seconds)``, on the features of
``heddle.policy.prediction.online_features`` (the context so far, survival in the step-count
distribution, group siblings).

Learning keeps only sufficient statistics (``X^T X``, ``X^T y``, ``y^T y``, n), so a refit is one
small linear solve and memory does not grow with the history. Each prediction remembers the
features it used; when the trajectory completes, those snapshots become training samples with the
true remaining amounts, so training sees exactly the features that prediction saw (including the
siblings and survival known at that time). Trajectories observed without snapshots (histories,
earlier rollouts) are decomposed step by step as live predictions would have seen them (at each
tool call, with the results returned before it).

The log-space fit predicts a median; ``exp(sigma^2 / 2)`` (the lognormal mean correction, with
sigma^2 the residual variance) turns it into a mean. Before ``min_samples`` samples the model
answers like the prompt-only baseline (sibling mean, else a prior; no tool time). Tool time is
learnt only from outcomes that carry per-step tool figures. Pure and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heddle.policy.prediction.base import Outcome, Progress, returned_tool_calls
from heddle.policy.prediction.online_features import (
    FEATURE_NAMES,
    NUM_FEATURES,
    GroupStats,
    Survival,
    features_of,
)
from heddle.traces import TraceTrajectory

__all__ = [
    "FEATURE_NAMES",
    "NUM_FEATURES",
    "OnlineModelConfig",
    "OnlinePredictor",
    "SufficientStats",
    "features_of",
]


@dataclass(frozen=True, slots=True)
class OnlineModelConfig:
    ridge: float = 1.0
    """L2 penalty on every coefficient but the bias (features are O(1..10) in log space)."""
    min_samples: int = 32
    """Training samples before the regression replaces the fallback."""
    max_tracked: int = 200_000
    """Trajectories whose prediction snapshots are remembered (oldest dropped beyond)."""
    prior_total_tokens: float = 8192.0
    """Fallback total length before any trajectory of the group or at all completed."""

    def __post_init__(self) -> None:
        if not self.ridge > 0:
            raise ValueError(f"ridge must be > 0, got {self.ridge}")
        if self.min_samples < 1 or self.max_tracked < 1:
            raise ValueError("min_samples and max_tracked must be >= 1")
        if not self.prior_total_tokens >= 0:
            raise ValueError("prior_total_tokens must be >= 0")


@dataclass(slots=True)
class _Snapshot:
    num_steps: int
    output_tokens: int
    features: np.ndarray


@dataclass(slots=True)
class SufficientStats:
    """``X^T X``, ``X^T y``, ``y^T y`` and n of the samples seen (ridge regression state)."""

    xtx: np.ndarray = field(default_factory=lambda: np.zeros((NUM_FEATURES, NUM_FEATURES)))
    xty: np.ndarray = field(default_factory=lambda: np.zeros(NUM_FEATURES))
    yty: float = 0.0
    num_samples: int = 0

    def add(self, features: np.ndarray, target: float) -> None:
        self.xtx += np.outer(features, features)
        self.xty += features * target
        self.yty += target * target
        self.num_samples += 1

    def solve(self, ridge: float) -> tuple[np.ndarray, float]:
        """Ridge coefficients (bias unpenalised) and the residual variance of the fit."""
        penalty = np.full(NUM_FEATURES, ridge)
        penalty[0] = 1e-9
        matrix = self.xtx + np.diag(penalty)
        try:
            weights = np.linalg.solve(matrix, self.xty)
        except np.linalg.LinAlgError:
            weights = np.linalg.lstsq(matrix, self.xty, rcond=None)[0]
        rss = self.yty - 2.0 * float(weights @ self.xty) + float(weights @ self.xtx @ weights)
        variance = max(0.0, rss) / max(1, self.num_samples - NUM_FEATURES)
        return weights, variance


class _Regression:
    """One log-space ridge model with its lazily refit weights."""

    def __init__(self, ridge: float) -> None:
        self.ridge = ridge
        self.stats = SufficientStats()
        self._weights: np.ndarray | None = None
        self._log_correction = 0.0

    def add(self, features: np.ndarray, amount: float) -> None:
        self.stats.add(features, math.log1p(max(0.0, amount)))
        self._weights = None

    def predict(self, features: np.ndarray) -> float:
        if self._weights is None:
            self._weights, variance = self.stats.solve(self.ridge)
            self._log_correction = variance / 2.0
        log_amount = float(self._weights @ features) + self._log_correction
        return max(0.0, math.expm1(min(log_amount, 30.0)))


class OnlinePredictor:
    """Implements ``heddle.policy.prediction.Predictor`` and ``ToolTimePredictor``; learns from
    every completion."""

    name = "online"

    def __init__(self, config: OnlineModelConfig | None = None) -> None:
        self.config = config or OnlineModelConfig()
        self._tokens = _Regression(self.config.ridge)
        self._tools = _Regression(self.config.ridge)
        self._survival = Survival()
        self._groups: dict[str, GroupStats] = {}
        self._snapshots: dict[str, list[_Snapshot]] = {}

    @property
    def stats(self) -> SufficientStats:
        """The token model's training state."""
        return self._tokens.stats

    @property
    def num_samples(self) -> int:
        return self._tokens.stats.num_samples

    @property
    def is_fitted(self) -> bool:
        return self.num_samples >= self.config.min_samples

    # ---- predicting ------------------------------------------------------------------------

    def predict(self, progress: Progress) -> float:
        siblings = self._siblings(progress.group_id)
        features = features_of(progress, siblings, self._survival)
        self._remember(progress, features)
        if not self.is_fitted:
            total = self.config.prior_total_tokens
            if siblings is not None and siblings.count > 0:
                total = siblings.mean_tokens
            return max(0.0, total - progress.output_tokens)
        return self._tokens.predict(features)

    def predict_tool_s(self, progress: Progress) -> float:
        if self._tools.stats.num_samples < self.config.min_samples:
            return 0.0
        features = features_of(progress, self._siblings(progress.group_id), self._survival)
        return self._tools.predict(features)

    def _siblings(self, group_id: str) -> GroupStats | None:
        return self._groups.get(group_id) if group_id else None

    def _remember(self, progress: Progress, features: np.ndarray) -> None:
        snapshots = self._snapshots.get(progress.traj_id)
        if snapshots is None:
            if len(self._snapshots) >= self.config.max_tracked:
                del self._snapshots[next(iter(self._snapshots))]
            snapshots = self._snapshots[progress.traj_id] = []
        # One snapshot per step, the latest winning: a re-prediction (replay) sees the same
        # context, and a reused trajectory id (a later rollout) must not keep a stale one.
        snapshots[:] = [s for s in snapshots if s.num_steps < progress.num_steps]
        snapshots.append(_Snapshot(progress.num_steps, progress.output_tokens, features))

    # ---- learning --------------------------------------------------------------------------

    def observe(self, outcome: Outcome) -> None:
        """Learn from a completed trajectory: its remembered snapshots whose context matches the
        outcome become samples; without any, its steps are decomposed (with the per-step tool
        figures when the outcome has them)."""
        steps = outcome.step_output_tokens
        snapshots = self._snapshots.pop(outcome.traj_id, [])
        prefix = _prefix_sums(steps)
        samples = [
            (s.features, s.num_steps)
            for s in snapshots
            if s.num_steps < len(steps) and s.output_tokens == prefix[s.num_steps]
        ]
        has_tools = len(outcome.step_tool_s) == len(steps)
        if not samples:
            samples = self._decompose(outcome, has_tools)
        for features, num_steps in samples:
            self._tokens.add(features, float(prefix[-1] - prefix[num_steps]))
            if has_tools:
                start = returned_tool_calls(num_steps)
                self._tools.add(features, math.fsum(outcome.step_tool_s[start:-1]))
        if outcome.group_id:
            group = self._groups.setdefault(outcome.group_id, GroupStats())
            group.add(float(prefix[-1]), len(steps))
        self._survival.add(len(steps))

    def observe_trace(self, trajectory: TraceTrajectory) -> None:
        """Learn from a recorded trajectory with its tool figures (ledger or trace history)."""
        self.observe(Outcome.from_trace(trajectory))

    def _decompose(self, outcome: Outcome, has_tools: bool) -> list[tuple[np.ndarray, int]]:
        """The features a live prediction would have seen after each step ``k``: ``k``
        generations and the tool results returned before the ``k``-th call."""
        siblings = self._siblings(outcome.group_id)
        progress = Progress(outcome.traj_id, outcome.group_id, outcome.prompt_tokens)
        samples: list[tuple[np.ndarray, int]] = []
        for index, output_tokens in enumerate(outcome.step_output_tokens):
            samples.append((features_of(progress, siblings, self._survival), index))
            if index and has_tools:
                progress = progress.after_tool(
                    outcome.step_tool_output_tokens[index - 1], outcome.step_tool_s[index - 1]
                )
            progress = progress.after_generation(output_tokens)
        return samples


def _prefix_sums(values: Sequence[int]) -> list[int]:
    sums = [0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums
