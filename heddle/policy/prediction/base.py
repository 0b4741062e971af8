"""The predictor protocol and its inputs: a trajectory's progress, a completed outcome, options."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from heddle.traces import TraceStep, TraceTrajectory


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
    first_output_text: str = ""
    """The first step's text (its plan), when known; the context predictor reads the texts."""
    last_output_text: str = ""
    last_tool_text: str = ""
    """What the latest returned tool call returned, when known."""

    def after_generation(self, output_tokens: int, text: str = "") -> Progress:
        is_first = self.num_steps == 0
        return replace(
            self,
            num_steps=self.num_steps + 1,
            output_tokens=self.output_tokens + output_tokens,
            first_output_tokens=output_tokens if is_first else self.first_output_tokens,
            last_output_tokens=output_tokens,
            first_output_text=text if is_first else self.first_output_text,
            last_output_text=text,
        )

    def after_tool(self, tool_output_tokens: int, tool_s: float, text: str = "") -> Progress:
        return replace(
            self,
            tool_output_tokens=self.tool_output_tokens + tool_output_tokens,
            tool_s=self.tool_s + tool_s,
            last_tool_text=text,
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


@runtime_checkable
class ToolTimePredictor(Protocol):
    """A predictor that also predicts the tool time still to come (the paper's makespan has
    ``T_tool`` beside the tokens; on agentic workloads it is about half of a trajectory)."""

    def predict_tool_s(self, progress: Progress) -> float:
        """Seconds of the tool calls that have not returned (>= 0), counting the call in
        flight: predictions run at submission (no call yet) and at each tool call, so after
        ``num_steps`` generations ``returned_tool_calls(num_steps)`` calls have returned."""
        ...


def returned_tool_calls(num_steps: int) -> int:
    """Tool calls returned when a prediction sees ``num_steps`` generations (the call of the
    last one is in flight)."""
    return max(0, num_steps - 1)


def predict_tool_s(predictor: Predictor, progress: Progress) -> float:
    """The predictor's remaining tool seconds, or 0 for predictors of tokens only."""
    if isinstance(predictor, ToolTimePredictor):
        return max(0.0, float(predictor.predict_tool_s(progress)))
    return 0.0


def remaining_tool_s(steps: Sequence[TraceStep], num_steps: int) -> float:
    """The truth ``predict_tool_s`` aims at: tool seconds from the call in flight on (a
    trajectory ends with a generation, so its last step's tool never runs)."""
    return math.fsum(step.tool_s for step in steps[returned_tool_calls(num_steps) : -1])


@dataclass(frozen=True, slots=True)
class PredictorOptions:
    seed: int = 0
    sigma: float = 0.5
    """Noisy oracle: standard deviation of the log error at step 0."""
    sigma_decay: float = 1.0
    """Noisy oracle: factor applied per completed step to sigma's excess over the floor (1: no
    progressive gain)."""
    sigma_floor: float = 0.25
    """Noisy oracle: sigma decays towards ``min(sigma, sigma_floor)``, never below (no effect
    without decay; ``heddle.sim.SimConfig.predictor_sigma_floor`` explains the default)."""
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
        if not (self.sigma_floor >= 0 and math.isfinite(self.sigma_floor)):
            raise ValueError(f"sigma_floor must be a finite number >= 0, got {self.sigma_floor}")
        if not 0 <= self.step_correlation <= 1:
            raise ValueError(f"step_correlation must be in [0, 1], got {self.step_correlation}")
        if not self.prior_total_tokens >= 0:
            raise ValueError("prior_total_tokens must be >= 0")
