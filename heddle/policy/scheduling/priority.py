"""Trajectory-level priorities (docs/paper.md, the paper's s.4): PPS and its baselines.

Each policy maps the facts of one pending generation request to a number; LARGER RUNS FIRST.
Ties are broken by the queue (earlier arrival, then id), never by the policy.

* ``pps``: progressive priority scheduling; the predicted remaining *time* of the trajectory
  (longest first, an adaptive LPT), re-ordered whenever a new prediction arrives, aged by the
  time it has waited (``ProgressivePriority``). Preemptive.
  The paper ranks by predicted length; its own makespan formula (docs/paper.md) is queueing + tokens
  x per-token time + tool time, and agentic tool time is about half of a trajectory and
  heavy-tailed, so a trajectory with few tokens and long test runs is as critical as one with
  many tokens: remaining time = predicted tokens x seconds per token + predicted tool seconds.
* ``fcfs``: first come first served at the *trajectory* level: the trajectory's submission time,
  so a trajectory coming back from a tool keeps its place.
* ``round_robin``: step-centric FCFS, what a plain engine queue does: the time this step's
  request arrived, so a returning trajectory goes to the back of the queue at every step.
* ``plas``: Autellix's program-level least attained service (arXiv 2502.13965, s.4) with its
  multi-level queue and anti-starvation (``MultiLevelLeastAttained`` below). Preemptive.
* ``spf``: shortest predicted remaining time first (the opposite of PPS; an SRPT-style baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

DEFAULT_SECONDS_PER_TOKEN = 0.025
"""Per-token time of a loaded worker before any is measured: ML.ENERGY ITLs at batch 128 are
20.7 ms (Qwen3-8B TP1), 26.2 ms (14B TP1) and 29.7 ms (32B TP2) (docs/calibration.md s.1)."""


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
    attained_tool_s: float = 0.0
    """Tool seconds it has spent so far (its calls' ``ToolReturned.duration_s``)."""
    arrival_s: float = 0.0
    """When the trajectory was submitted."""
    step_arrival_s: float = 0.0
    """When the current step's generation request arrived (after its tool call returned)."""
    waited_s: float = 0.0
    """Seconds it has waited in engine queues so far, over all its steps, the current wait
    included (0: not measured). Autellix's anti-starvation reads it."""


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
    """Longest predicted remaining time first, aged by every second the trajectory has
    waited: in the control plane (KV admission), in engine queues, and in the wait going on
    now. A trajectory predicted short that keeps yielding to long ones gains a second of
    priority for every second it waits, so no one waits without bound and a mispredicted one
    catches up (exact predictions make waiting trajectories short ones, which aging lets
    through before they become the stragglers).

    A policy reads no clock, so the aging is written as a key that never changes while a
    request waits: trajectories of a rollout start together, and whatever time one did not
    spend generating (``attained_service_s``) or in tools (``attained_tool_s``) it spent
    waiting, so ``remaining - aging * (service + tools)`` orders the requests waiting at any
    instant exactly as ``remaining + aging * time waited`` does (the instant's own time
    cancels).

    The key's level is not a remaining time (it falls as a trajectory is served), so an
    engine's preemption margin relative to the running request's priority
    (``PreemptionConfig.min_relative_gap``) is a margin on this key."""

    name: str = "pps"
    is_preemptive: bool = True
    aging: float = 1.0
    """Priority seconds per second waited (0: pure LPT)."""

    def priority(self, facts: TrajectoryFacts) -> float:
        return remaining_time_s(facts) - self.aging * (
            facts.attained_service_s + facts.attained_tool_s
        )


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
class MultiLevelLeastAttained:
    """Autellix's PLAS scheduler (arXiv 2502.13965, s.4): program-level least attained
    service, discretised into a multi-level queue, with anti-starvation.

    * Program-level service (s.4, PLAS): a program's priority comes from the service all its
      calls have received so far (here a trajectory's engine seconds, prefill and decode, over
      all its steps; or its output tokens for shells that do not time the engine).
    * Discretised levels (s.4, the multi-level queue): ``num_levels`` queues, queue ``k``
      holding programs whose attained service lies in ``[b_k, b_{k+1})`` with ``b_0 = 0``,
      ``b_1 = first_level_s`` and each bound ``growth`` times the last; the last is open. A
      call enters the queue of its program's service (not the top, as plain MLFQ would), and
      one whose service crosses its queue's bound drops to the next when priorities are next
      evaluated. Within a queue calls run first come first served: every call of a level gets
      the same priority and the waiting queue breaks ties by arrival.
    * Anti-starvation (s.4): a program whose total waiting time has reached
      ``starvation_ratio`` times its attained service is promoted to the top queue; running
      brings the ratio back down, and it then falls to its service's queue.

    Assumed: the paper gives the rules, not (to our reading) the constants for this setting;
    ``num_levels`` 8, ``first_level_s`` 1 s of engine time (40 tokens at the default 25 ms a
    token) doubling per level, so the open last level starts at 64 s, and ``starvation_ratio``
    2 are ours. The caller supplies ``waited_s``; Heddle's priority decider counts the engine
    queueing of a program's finished calls and re-evaluates at each call (a pure policy reads
    no clock), so a starved program is promoted at its next call, not while it waits.
    """

    name: str = "plas"
    is_preemptive: bool = True
    service: Literal["seconds", "tokens"] = "seconds"
    """Autellix counts engine time; ``tokens`` serves shells that do not measure it."""
    num_levels: int = 8
    first_level_s: float = 1.0
    """The top queue's service bound (seconds; tokens at ``seconds_per_token`` otherwise)."""
    growth: float = 2.0
    starvation_ratio: float = 2.0

    def __post_init__(self) -> None:
        if self.num_levels < 1 or self.first_level_s <= 0 or self.growth <= 1:
            raise ValueError("need num_levels >= 1, first_level_s > 0 and growth > 1")

    def service_s(self, facts: TrajectoryFacts) -> float:
        """Attained service in seconds (tokens at the measured per-token time)."""
        if self.service == "seconds":
            return facts.attained_service_s
        return facts.attained_service_tokens * facts.seconds_per_token

    def level(self, facts: TrajectoryFacts) -> int:
        """The queue the trajectory's next call joins: 0 is served first."""
        service = self.service_s(facts)
        if service > 0 and facts.waited_s >= self.starvation_ratio * service:
            return 0
        level, bound = 0, self.first_level_s
        while level < self.num_levels - 1 and service >= bound:
            level, bound = level + 1, bound * self.growth
        return level

    def priority(self, facts: TrajectoryFacts) -> float:
        return -float(self.level(facts))


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
    "plas": MultiLevelLeastAttained,
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
