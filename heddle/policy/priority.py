"""Trajectory-level priorities (SPEC.md s.1): PPS and its baselines.

Each policy maps the facts of one pending generation request to a number; LARGER RUNS FIRST.
Ties are broken by the queue (earlier arrival, then id), never by the policy.

* ``pps``: progressive priority scheduling; the predicted remaining *time* of the trajectory
  (longest first, an adaptive LPT), re-ordered whenever a new prediction arrives. Preemptive.
  The paper ranks by predicted length; its own makespan formula (SPEC.md) is queueing + tokens
  x per-token time + tool time, and agentic tool time is about half of a trajectory and
  heavy-tailed, so a trajectory with few tokens and long test runs is as critical as one with
  many tokens: remaining time = predicted tokens x seconds per token + predicted tool seconds.
* ``fcfs``: first come first served at the *trajectory* level: the trajectory's submission time,
  so a trajectory coming back from a tool keeps its place.
* ``round_robin``: step-centric FCFS, what a plain engine queue does: the time this step's
  request arrived, so a returning trajectory goes to the back of the queue at every step.
* ``plas``: Autellix's program-level least attained service (arXiv 2502.13965, s.4): the least
  cumulative service (engine seconds, or output tokens) runs first. Preemptive.
* ``spf``: shortest predicted remaining time first (the opposite of PPS; an SRPT-style baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

DEFAULT_SECONDS_PER_TOKEN = 0.025
"""Per-token time of a loaded worker before any is measured: ML.ENERGY ITLs at batch 128 are
20.7 ms (Qwen3-8B TP1), 26.2 ms (14B TP1) and 29.7 ms (32B TP2) (calibration.md s.1)."""


@dataclass(frozen=True, slots=True)
class TrajectoryFacts:
    """What a priority may depend on, for one trajectory's pending generation request."""

    predicted_remaining_tokens: float = 0.0
    """The latest prediction of the output tokens the trajectory still has to generate."""
    predicted_remaining_tool_s: float = 0.0
    """The latest prediction of the tool seconds it still has to spend (0: none known)."""
    seconds_per_token: float = DEFAULT_SECONDS_PER_TOKEN
    """Wall seconds one output token takes on the workers (measured by the caller), the rate
    at which tokens and tool seconds add up to a remaining time."""
    attained_service_tokens: float = 0.0
    """Output tokens generated so far, over all its steps."""
    attained_service_s: float = 0.0
    """Engine seconds spent on it so far (decode and prefill), over all its steps."""
    arrival_s: float = 0.0
    """When the trajectory was submitted."""
    step_arrival_s: float = 0.0
    """When the current step's generation request arrived (after its tool call returned)."""


class PriorityPolicy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def is_preemptive(self) -> bool:
        """Whether a waiting request of higher priority may evict a running one."""
        ...

    def priority(self, facts: TrajectoryFacts) -> float:
        """Larger runs first."""
        ...


@dataclass(frozen=True, slots=True)
class ProgressivePriority:
    name: str = "pps"
    is_preemptive: bool = True

    def priority(self, facts: TrajectoryFacts) -> float:
        return remaining_time_s(facts)


def remaining_time_s(facts: TrajectoryFacts) -> float:
    """Predicted remaining wall time: tokens at the measured per-token time, plus tools."""
    return (
        facts.predicted_remaining_tokens * facts.seconds_per_token
        + facts.predicted_remaining_tool_s
    )


@dataclass(frozen=True, slots=True)
class FirstComeFirstServed:
    name: str = "fcfs"
    is_preemptive: bool = False

    def priority(self, facts: TrajectoryFacts) -> float:
        return -facts.arrival_s


@dataclass(frozen=True, slots=True)
class RoundRobin:
    name: str = "round_robin"
    is_preemptive: bool = False

    def priority(self, facts: TrajectoryFacts) -> float:
        return -facts.step_arrival_s


@dataclass(frozen=True, slots=True)
class LeastAttainedService:
    name: str = "plas"
    is_preemptive: bool = True
    service: Literal["seconds", "tokens"] = "seconds"
    """Autellix counts engine time; ``tokens`` serves shells that do not measure it."""

    def priority(self, facts: TrajectoryFacts) -> float:
        if self.service == "seconds":
            return -facts.attained_service_s
        return -facts.attained_service_tokens


@dataclass(frozen=True, slots=True)
class ShortestPredictedFirst:
    name: str = "spf"
    is_preemptive: bool = False

    def priority(self, facts: TrajectoryFacts) -> float:
        return -remaining_time_s(facts)


PRIORITY_POLICIES: dict[str, Callable[[], PriorityPolicy]] = {
    "pps": ProgressivePriority,
    "fcfs": FirstComeFirstServed,
    "round_robin": RoundRobin,
    "plas": LeastAttainedService,
    "spf": ShortestPredictedFirst,
}
"""Policies by name (the CLI's ``--priority`` choices)."""


def priority_policy(name: str) -> PriorityPolicy:
    """The policy registered as ``name``; ``ValueError`` listing the choices otherwise."""
    factory = PRIORITY_POLICIES.get(name)
    if factory is None:
        raise ValueError(
            f"unknown priority policy {name!r}; choose one of {sorted(PRIORITY_POLICIES)}"
        )
    return factory()
