"""Predictors of a trajectory's REMAINING output tokens from what is known after each step.

The paper (s.4.1) re-predicts after every step, while the tool runs, from the context so far;
accuracy rises with steps. One protocol serves every predictor:

* ``predict(progress) -> float``: remaining output tokens (>= 0) of a trajectory in flight.
* ``observe(outcome)``: a completed trajectory, for predictors that learn online (or offline, by
  observing a history of earlier rollouts through ``fit``).

Implementations, by registry name (``PREDICTORS``; names feed the CLI's choices):

* ``oracle``: the truth, from the trace (an upper bound for the predictor).
* ``noisy_oracle``: the truth times a lognormal error ``exp(sigma_k * z)`` with
  ``sigma_k = sigma * sigma_decay ** steps`` and ``z = sqrt(rho) * z_traj + sqrt(1 - rho) *
  z_step`` standard normal: ``rho = step_correlation`` makes a trajectory's error persist over
  its steps (a learned model sees nearly the same context twice). The draws are pure functions
  of (seed, trajectory[, step]), so a re-run or a replay predicts the same.
* ``prompt_only``: the paper's static baseline: a trajectory's total length from its prompt alone
  (the mean total of its group's completed samples, else a least-squares line in prompt tokens,
  else the mean total seen, else a prior), minus what it has generated.
* ``history``: the paper's history baseline: the mean remaining length of completed trajectories
  at the same step index.
* ``online``: a ridge regression on context features refit at every completion
  (``heddle.policy.online_predictor``), what a live control plane runs by default.

A learned model (a later issue) implements the same protocol and adds one entry to
``PREDICTORS``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from heddle.traces import TraceTrajectory


@dataclass(frozen=True, slots=True)
class Progress:
    """What is known about a trajectory in flight (the predictor's input)."""

    traj_id: str
    group_id: str = ""
    prompt_tokens: int = 0
    num_steps: int = 0
    """Generation steps completed so far."""
    output_tokens: int = 0
    """Tokens generated over those steps."""
    tool_output_tokens: int = 0
    tool_s: float = 0.0
    first_output_tokens: int = 0
    """The first step's output (its plan is a strong signal, paper s.4.1)."""
    last_output_tokens: int = 0

    def after_generation(self, output_tokens: int) -> Progress:
        return replace(
            self,
            num_steps=self.num_steps + 1,
            output_tokens=self.output_tokens + output_tokens,
            first_output_tokens=output_tokens if self.num_steps == 0 else self.first_output_tokens,
            last_output_tokens=output_tokens,
        )

    def after_tool(self, tool_output_tokens: int, tool_s: float) -> Progress:
        return replace(
            self,
            tool_output_tokens=self.tool_output_tokens + tool_output_tokens,
            tool_s=self.tool_s + tool_s,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A completed trajectory, as learning predictors observe it."""

    traj_id: str
    group_id: str
    prompt_tokens: int
    step_output_tokens: tuple[int, ...]
    step_tool_output_tokens: tuple[int, ...] = ()
    """Observation tokens after each step, when known (empty otherwise)."""
    step_tool_s: tuple[float, ...] = ()
    """Tool seconds after each step, when known (empty otherwise)."""

    @property
    def total_output_tokens(self) -> int:
        return sum(self.step_output_tokens)

    @classmethod
    def from_trace(cls, trajectory: TraceTrajectory) -> Outcome:
        steps = trajectory.steps
        return cls(
            trajectory.id,
            trajectory.group,
            trajectory.prompt_tokens,
            tuple(step.output_tokens for step in steps),
            tuple(step.tool_output_tokens for step in steps),
            tuple(step.tool_s for step in steps),
        )


class Predictor(Protocol):
    @property
    def name(self) -> str: ...

    def predict(self, progress: Progress) -> float:
        """Remaining output tokens of the trajectory (>= 0)."""
        ...

    def observe(self, outcome: Outcome) -> None:
        """Learn from a completed trajectory (a no-op for predictors that do not learn)."""
        ...


@dataclass(frozen=True, slots=True)
class PredictorOptions:
    seed: int = 0
    sigma: float = 0.5
    """Noisy oracle: standard deviation of the log error at step 0."""
    sigma_decay: float = 1.0
    """Noisy oracle: factor applied to sigma per completed step (1: no progressive gain)."""
    step_correlation: float = 0.0
    """Noisy oracle: correlation of one trajectory's log errors across steps (0: independent)."""
    trace: Mapping[str, TraceTrajectory] = field(default_factory=dict)
    """The truth, for the oracles: trajectory id -> its trace."""
    prior_total_tokens: float = 8192.0
    """Baselines' guess of a trajectory's total output before they have observed any."""

    def __post_init__(self) -> None:
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be a finite number >= 0, got {self.sigma}")
        if not 0 < self.sigma_decay <= 1:
            raise ValueError(f"sigma_decay must be in (0, 1], got {self.sigma_decay}")
        if not 0 <= self.step_correlation <= 1:
            raise ValueError(f"step_correlation must be in [0, 1], got {self.step_correlation}")
        if not self.prior_total_tokens >= 0:
            raise ValueError("prior_total_tokens must be >= 0")


class OraclePredictor:
    """The true remaining output of each trajectory, from the trace."""

    name = "oracle"

    def __init__(self, trace: Mapping[str, TraceTrajectory]) -> None:
        self._suffix: dict[str, list[int]] = {}
        for traj_id, trajectory in trace.items():
            suffix = [0] * (len(trajectory.steps) + 1)
            for index in range(len(trajectory.steps) - 1, -1, -1):
                suffix[index] = suffix[index + 1] + trajectory.steps[index].output_tokens
            self._suffix[traj_id] = suffix

    def predict(self, progress: Progress) -> float:
        suffix = self._suffix.get(progress.traj_id)
        if suffix is None:
            raise ValueError(f"the oracle has no trace for trajectory {progress.traj_id!r}")
        return float(suffix[min(progress.num_steps, len(suffix) - 1)])

    def observe(self, outcome: Outcome) -> None:
        return None


class NoisyOraclePredictor:
    """The oracle times a deterministic lognormal error per (seed, trajectory, step)."""

    name = "noisy_oracle"

    def __init__(self, oracle: OraclePredictor, options: PredictorOptions) -> None:
        self._oracle = oracle
        self._seed = options.seed
        self._sigma = options.sigma
        self._decay = options.sigma_decay
        self._shared = math.sqrt(options.step_correlation)
        self._fresh = math.sqrt(1.0 - options.step_correlation)

    def predict(self, progress: Progress) -> float:
        truth = self._oracle.predict(progress)
        sigma = self._sigma * self._decay**progress.num_steps
        z = self._fresh * _normal(f"{self._seed}:{progress.traj_id}:{progress.num_steps}")
        if self._shared:
            z += self._shared * _normal(f"{self._seed}:{progress.traj_id}")
        return truth * math.exp(sigma * z)

    def observe(self, outcome: Outcome) -> None:
        return None


def _normal(key: str) -> float:
    """A standard normal draw that is a pure function of ``key``: two uniforms from a stable
    hash of the key, through Box-Muller (seeding a ``random.Random`` per draw is far slower)."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    first = (int.from_bytes(digest[:8], "big") + 1) / 2.0**64  # in (0, 1]
    second = int.from_bytes(digest[8:], "big") / 2.0**64
    return math.sqrt(-2.0 * math.log(first)) * math.cos(2.0 * math.pi * second)


class PromptOnlyPredictor:
    """Total length from the prompt alone (group mean, else a line in prompt tokens)."""

    name = "prompt_only"

    def __init__(self, prior_total_tokens: float) -> None:
        self._prior = prior_total_tokens
        self._group_sum: dict[str, float] = {}
        self._group_count: dict[str, int] = {}
        self._n = 0
        self._sx = self._sy = self._sxx = self._sxy = 0.0

    def predict(self, progress: Progress) -> float:
        return max(
            0.0,
            self.predict_total(progress.group_id, progress.prompt_tokens) - progress.output_tokens,
        )

    def predict_total(self, group_id: str, prompt_tokens: int) -> float:
        count = self._group_count.get(group_id, 0)
        if group_id and count:
            return self._group_sum[group_id] / count
        if self._n == 0:
            return self._prior
        variance = self._n * self._sxx - self._sx * self._sx
        if self._n < 2 or variance <= 1e-9 * max(1.0, self._sxx * self._n):
            return self._sy / self._n
        slope = (self._n * self._sxy - self._sx * self._sy) / variance
        intercept = (self._sy - slope * self._sx) / self._n
        return max(0.0, intercept + slope * prompt_tokens)

    def observe(self, outcome: Outcome) -> None:
        total = float(outcome.total_output_tokens)
        if outcome.group_id:
            self._group_sum[outcome.group_id] = self._group_sum.get(outcome.group_id, 0.0) + total
            self._group_count[outcome.group_id] = self._group_count.get(outcome.group_id, 0) + 1
        x = float(outcome.prompt_tokens)
        self._n += 1
        self._sx += x
        self._sy += total
        self._sxx += x * x
        self._sxy += x * total


class HistoryPredictor:
    """Mean remaining output of completed trajectories that went on past the same step index."""

    name = "history"

    def __init__(self, prior_total_tokens: float) -> None:
        self._prior = prior_total_tokens
        self._remaining_sum: list[float] = []
        self._count: list[int] = []
        self._last_step_sum = 0.0
        self._num_observed = 0

    def predict(self, progress: Progress) -> float:
        index = progress.num_steps
        if index < len(self._count):
            return self._remaining_sum[index] / self._count[index]
        if self._num_observed:
            # Longer than anything seen: guess one more step of the usual last-step size.
            return self._last_step_sum / self._num_observed
        return max(0.0, self._prior - progress.output_tokens)

    def observe(self, outcome: Outcome) -> None:
        steps = outcome.step_output_tokens
        if not steps:
            return
        while len(self._count) < len(steps):
            self._remaining_sum.append(0.0)
            self._count.append(0)
        remaining = float(sum(steps))
        for index, output_tokens in enumerate(steps):
            self._remaining_sum[index] += remaining
            self._count[index] += 1
            remaining -= output_tokens
        self._last_step_sum += steps[-1]
        self._num_observed += 1


def _oracle(options: PredictorOptions) -> Predictor:
    return OraclePredictor(options.trace)


def _noisy_oracle(options: PredictorOptions) -> Predictor:
    return NoisyOraclePredictor(OraclePredictor(options.trace), options)


def _prompt_only(options: PredictorOptions) -> Predictor:
    return PromptOnlyPredictor(options.prior_total_tokens)


def _history(options: PredictorOptions) -> Predictor:
    return HistoryPredictor(options.prior_total_tokens)


def _online(options: PredictorOptions) -> Predictor:
    # Imported here: the online model builds on this module's Progress and Outcome.
    from heddle.policy.online_predictor import OnlineModelConfig, OnlinePredictor

    return OnlinePredictor(OnlineModelConfig(prior_total_tokens=options.prior_total_tokens))


PREDICTORS: dict[str, Callable[[PredictorOptions], Predictor]] = {
    "oracle": _oracle,
    "noisy_oracle": _noisy_oracle,
    "prompt_only": _prompt_only,
    "history": _history,
    "online": _online,
}
"""Predictor factories by name (the CLI's ``--predictor`` choices)."""


def make_predictor(name: str, options: PredictorOptions | None = None) -> Predictor:
    """A fresh predictor registered as ``name``; ``ValueError`` listing the choices otherwise."""
    factory = PREDICTORS.get(name)
    if factory is None:
        raise ValueError(f"unknown predictor {name!r}; choose one of {sorted(PREDICTORS)}")
    return factory(options or PredictorOptions())


def fit(predictor: Predictor, history: Iterable[TraceTrajectory]) -> Predictor:
    """Let a predictor observe completed trajectories of earlier rollouts; returns it."""
    for trajectory in history:
        predictor.observe(Outcome.from_trace(trajectory))
    return predictor


def progress_of(trajectory: TraceTrajectory, num_steps: int) -> Progress:
    """The progress of a trace trajectory after ``num_steps`` completed steps (with tools)."""
    progress = Progress(trajectory.id, trajectory.group, trajectory.prompt_tokens)
    for step in trajectory.steps[:num_steps]:
        progress = progress.after_generation(step.output_tokens)
        progress = progress.after_tool(step.tool_output_tokens, step.tool_s)
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
