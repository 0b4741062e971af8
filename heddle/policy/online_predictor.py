"""An online regression predictor of a trajectory's remaining output, learnt while rollouts run.

The paper (s.4.1) fine-tunes a small LM on (context so far, remaining length) tuples decomposed
from historical trajectories and re-predicts after every step. This is the cheap stand-in a live
control plane can refit at every completion: ridge regression of ``log1p(remaining tokens)`` on
features of the context so far:

- prompt tokens, steps completed, tokens generated so far (total, first step, last step, mean);
- tool observation tokens and tool seconds so far;
- the completed lengths of the trajectory's group siblings (same prompt: GRPO samples, and the
  same prompt in earlier rollouts), which the paper's Fig. 5 shows to be informative but noisy.

Learning keeps only sufficient statistics (``X^T X``, ``X^T y``, ``y^T y``, n), so a refit is one
small linear solve and memory does not grow with the history. Each prediction remembers the
features it used; when the trajectory completes, those snapshots become training samples with the
true remaining length, so training sees exactly the features that prediction saw (including the
siblings known at that time). Trajectories observed without snapshots (histories, earlier
rollouts) are decomposed step by step (``observe_trace`` uses the per-step tool figures).

The log-space fit predicts a median; ``exp(sigma^2 / 2)`` (the lognormal mean correction, with
sigma^2 the residual variance) turns it into a mean. Before ``min_samples`` samples the model
answers like the prompt-only baseline (sibling mean, else a prior). Pure and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heddle.policy.predictors import Outcome, Progress
from heddle.traces import TraceTrajectory

FEATURE_NAMES = (
    "bias",
    "log_prompt_tokens",
    "num_steps",
    "log_num_steps",
    "log_output_tokens",
    "log_first_output_tokens",
    "log_last_output_tokens",
    "log_mean_step_tokens",
    "log_tool_output_tokens",
    "log_tool_s",
    "has_siblings",
    "log_sibling_mean_tokens",
    "log_sibling_max_tokens",
)
NUM_FEATURES = len(FEATURE_NAMES)


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
class _Group:
    count: int = 0
    total_tokens: float = 0.0
    max_tokens: float = 0.0

    def add(self, total_tokens: float) -> None:
        self.count += 1
        self.total_tokens += total_tokens
        self.max_tokens = max(self.max_tokens, total_tokens)

    @property
    def mean_tokens(self) -> float:
        return self.total_tokens / self.count if self.count else 0.0


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


def features_of(progress: Progress, siblings: _Group | None) -> np.ndarray:
    """The regression input for a trajectory in flight (see ``FEATURE_NAMES``)."""
    steps = progress.num_steps
    mean_step = progress.output_tokens / steps if steps else 0.0
    has_siblings = siblings is not None and siblings.count > 0
    return np.array(
        (
            1.0,
            math.log1p(progress.prompt_tokens),
            float(steps),
            math.log1p(steps),
            math.log1p(progress.output_tokens),
            math.log1p(progress.first_output_tokens),
            math.log1p(progress.last_output_tokens),
            math.log1p(mean_step),
            math.log1p(progress.tool_output_tokens),
            math.log1p(max(0.0, progress.tool_s)),
            1.0 if has_siblings else 0.0,
            math.log1p(siblings.mean_tokens) if has_siblings and siblings else 0.0,
            math.log1p(siblings.max_tokens) if has_siblings and siblings else 0.0,
        )
    )


class OnlinePredictor:
    """Implements ``heddle.policy.predictors.Predictor``; learns from every completion."""

    name = "online"

    def __init__(self, config: OnlineModelConfig | None = None) -> None:
        self.config = config or OnlineModelConfig()
        self.stats = SufficientStats()
        self._groups: dict[str, _Group] = {}
        self._snapshots: dict[str, list[_Snapshot]] = {}
        self._weights: np.ndarray | None = None
        self._log_correction = 0.0
        self._is_stale = True

    @property
    def num_samples(self) -> int:
        return self.stats.num_samples

    @property
    def is_fitted(self) -> bool:
        return self.stats.num_samples >= self.config.min_samples

    # ---- predicting ------------------------------------------------------------------------

    def predict(self, progress: Progress) -> float:
        siblings = self._groups.get(progress.group_id) if progress.group_id else None
        features = features_of(progress, siblings)
        self._remember(progress, features)
        if not self.is_fitted:
            return self._fallback(progress, siblings)
        weights = self._current_weights()
        log_remaining = float(weights @ features) + self._log_correction
        return max(0.0, math.expm1(min(log_remaining, 30.0)))

    def _fallback(self, progress: Progress, siblings: _Group | None) -> float:
        total = self.config.prior_total_tokens
        if siblings is not None and siblings.count > 0:
            total = siblings.mean_tokens
        return max(0.0, total - progress.output_tokens)

    def _current_weights(self) -> np.ndarray:
        if self._is_stale or self._weights is None:
            self._weights, variance = self.stats.solve(self.config.ridge)
            self._log_correction = variance / 2.0
            self._is_stale = False
        return self._weights

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
        samples: list[tuple[np.ndarray, float]] = [
            (s.features, float(prefix[-1] - prefix[s.num_steps]))
            for s in snapshots
            if s.num_steps < len(steps) and s.output_tokens == prefix[s.num_steps]
        ]
        if not samples:
            tools = list(zip(outcome.step_tool_output_tokens, outcome.step_tool_s, strict=False))
            if len(tools) != len(steps):
                tools = [(0, 0.0)] * len(steps)
            progress = Progress(outcome.traj_id, outcome.group_id, outcome.prompt_tokens)
            samples = self._decompose(progress, steps, tools)
        self._learn(outcome.group_id, samples, float(prefix[-1]))

    def observe_trace(self, trajectory: TraceTrajectory) -> None:
        """Learn from a recorded trajectory with its tool figures (ledger or trace history)."""
        self.observe(Outcome.from_trace(trajectory))

    def _decompose(
        self, start: Progress, steps: Sequence[int], tools: Sequence[tuple[int, float]]
    ) -> list[tuple[np.ndarray, float]]:
        siblings = self._groups.get(start.group_id) if start.group_id else None
        remaining = float(sum(steps))
        progress = start
        samples: list[tuple[np.ndarray, float]] = []
        for output_tokens, (tool_tokens, tool_s) in zip(steps, tools, strict=True):
            samples.append((features_of(progress, siblings), remaining))
            remaining -= output_tokens
            progress = progress.after_generation(output_tokens).after_tool(tool_tokens, tool_s)
        return samples

    def _learn(
        self, group_id: str, samples: list[tuple[np.ndarray, float]], total_tokens: float
    ) -> None:
        for features, remaining in samples:
            self.stats.add(features, math.log1p(max(0.0, remaining)))
        if group_id:
            self._groups.setdefault(group_id, _Group()).add(total_tokens)
        self._is_stale = True


def _prefix_sums(values: Sequence[int]) -> list[int]:
    sums = [0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums
