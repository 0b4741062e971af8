"""The predictor protocol and its inputs: a trajectory's progress, a completed outcome, options."""

from __future__ import annotations

import math
from collections.abc import Mapping
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
