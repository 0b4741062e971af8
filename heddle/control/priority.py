"""The priority decider: turns trajectory facts into priorities under one policy.

Facts (``heddle.policy.scheduling.priority.TrajectoryFacts``) come from events: the submission time
(``TrajectorySubmitted``), the latest prediction of remaining tokens and tool seconds
(``Predicted``), attained service (``Generated``: output tokens, prefill + decode seconds), and
the arrival of the current step's request (``ToolReturned``; the submission for step 0). The
seconds per output token that turn a token prediction into time are measured per rollout: the
generation seconds (prefill + decode) of every ``Generated`` so far over its tokens, with
``PriorityConfig.seconds_per_token`` as the prior until ``min_measured_tokens`` are seen.
Where the trajectory lives comes from ``TrajectoryPlaced`` and ``Migrated``; whether it is
generating from ``ToolCalled`` / ``ToolReturned`` / ``TrajectoryPlaced``.

When a trajectory's priority changes by more than the hysteresis (``min_relative_change`` of the
old value, at least ``min_absolute_change``), it emits ``Prioritized`` (the router reads it to
stamp the next step's request) and, only while the trajectory has a request on a worker, a
``Reprioritize`` command: in a tool gap the next request carries the new priority anyway.

A ``TrajectoryPlaced`` of a generating trajectory also gets a ``Reprioritize`` with the current
priority: the router stamps the request with the last ``Prioritized`` it had read, and the
priorities of a rollout's first predictions are emitted while the router places the whole
rollout, so every first request would otherwise run at the submission priority (0 under PPS:
the first step would be served in submission order and the requests it holds up would be
preempted by the first later step).

An operator's ``TrajectoryReprioritizeRequested`` (``heddle.events.operator``) sets the priority
at once (``Prioritized`` and, while it has a request on a worker, ``Reprioritize`` to whichever
worker holds it now); with ``pin`` the policy no longer changes it, without it the policy's next
update may.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.control.decider import Output
from heddle.control.pace import Pace
from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    Migrated,
    Predicted,
    Prioritized,
    Reprioritize,
    ToolCalled,
    ToolReturned,
    TrajectoryEvent,
    TrajectoryPlaced,
    TrajectoryReprioritizeRequested,
    TrajectorySubmitted,
)
from heddle.ids import derive_id
from heddle.policy.scheduling.priority import (
    DEFAULT_SECONDS_PER_TOKEN,
    PriorityPolicy,
    TrajectoryFacts,
)

SUBMISSION_ORDER_S = 1e-6
"""Trajectories submitted at one instant arrive in submission order (the KV gate too)."""


@dataclass(frozen=True, slots=True)
class PriorityConfig:
    min_relative_change: float = 0.0
    """Emit only when the priority moved by more than this fraction of its old magnitude."""
    min_absolute_change: float = 0.0
    """... and by more than this much."""
    seconds_per_token: float = DEFAULT_SECONDS_PER_TOKEN
    """Per-token time assumed until a rollout's own is measured."""
    min_measured_tokens: int = 1000
    """Generated tokens of a rollout before its measured per-token time replaces the prior."""

    def __post_init__(self) -> None:
        if self.min_relative_change < 0 or self.min_absolute_change < 0:
            raise ValueError("priority hysteresis must be >= 0")
        if not self.seconds_per_token > 0 or self.min_measured_tokens < 0:
            raise ValueError("seconds_per_token must be > 0 and min_measured_tokens >= 0")


@dataclass(slots=True)
class _Tracked:
    """Mutable facts of one trajectory (``TrajectoryFacts`` is built only to prioritise)."""

    arrival_s: float
    step_arrival_s: float
    priority: float = 0.0
    predicted_remaining_tokens: float = 0.0
    predicted_remaining_tool_s: float = 0.0
    attained_service_tokens: float = 0.0
    attained_service_s: float = 0.0
    attained_tool_s: float = 0.0
    waited_s: float = 0.0
    """Engine queueing of its finished steps (``Generated.queue_s``), for anti-starvation;
    a step's own wait counts once it is done, when the next step is prioritised."""
    worker_id: str = ""
    is_generating: bool = True
    """Between the step's request and its tool call (or before the first step)."""
    is_pinned: bool = False
    """An operator fixed the priority: the policy no longer changes it."""

    def facts(self, seconds_per_token: float) -> TrajectoryFacts:
        return TrajectoryFacts(
            predicted_remaining_tokens=self.predicted_remaining_tokens,
            predicted_remaining_tool_s=self.predicted_remaining_tool_s,
            seconds_per_token=seconds_per_token,
            attained_service_tokens=self.attained_service_tokens,
            attained_service_s=self.attained_service_s,
            attained_tool_s=self.attained_tool_s,
            arrival_s=self.arrival_s,
            step_arrival_s=self.step_arrival_s,
            waited_s=self.waited_s,
        )


class PriorityDecider:
    """State: the facts and last emitted priority of every trajectory in flight."""

    name = "priority"
    handles: frozenset[type[Event]] = frozenset(
        {
            TrajectorySubmitted,
            Predicted,
            Generated,
            ToolCalled,
            ToolReturned,
            TrajectoryPlaced,
            Migrated,
            Completed,
            Failed,
            TrajectoryReprioritizeRequested,
        }
    )

    def __init__(self, policy: PriorityPolicy, config: PriorityConfig | None = None) -> None:
        self.policy = policy
        self.config = config or PriorityConfig()
        self._tracked: dict[tuple[str, str], _Tracked] = {}
        """(rollout id, trajectory id) -> facts (trajectory ids repeat across rollouts)."""
        self._paces: dict[str, Pace] = {}

    def priority_of(self, rollout_id: str, traj_id: str) -> float | None:
        tracked = self._tracked.get((rollout_id, traj_id))
        return None if tracked is None else tracked.priority

    def decide(self, event: Event) -> list[Output]:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        if isinstance(event, TrajectorySubmitted):
            if key in self._tracked:
                return []
            # Trajectories submitted at one instant arrive in submission order (1 us apart), so
            # trajectory-level FCFS keeps that order rather than tying.
            at = event.occurred_at + event.spec.index * SUBMISSION_ORDER_S
            fresh = _Tracked(arrival_s=at, step_arrival_s=event.occurred_at)
            fresh.priority = self.policy.priority(fresh.facts(self._pace_of(event.rollout_id)))
            self._tracked[key] = fresh
            return [self._prioritized(event, fresh, "submitted")]
        tracked = self._tracked.get(key)
        if tracked is None:
            return []
        match event:
            case Predicted():
                tracked.predicted_remaining_tokens = event.predicted_remaining_tokens
                tracked.predicted_remaining_tool_s = event.predicted_remaining_tool_s
                return self._update(event, tracked)
            case Generated():
                num_tokens = len(event.output_token_ids)
                tracked.attained_service_tokens += num_tokens
                tracked.attained_service_s += event.prefill_s + event.decode_s
                tracked.waited_s += event.queue_s
                self._paces.setdefault(event.rollout_id, Pace()).add(event)
                return self._update(event, tracked)
            case ToolCalled():
                tracked.is_generating = False
            case ToolReturned():
                tracked.is_generating = True
                tracked.step_arrival_s = event.occurred_at
                tracked.attained_tool_s += event.duration_s
                return self._update(event, tracked)
            case TrajectoryPlaced():
                tracked.worker_id = event.worker_id
                if tracked.is_generating:
                    return [self._reprioritize(event, tracked, event.event_id)]
            case Migrated():
                tracked.worker_id = event.target_worker_id
            case TrajectoryReprioritizeRequested():
                return self._set_by_operator(event, tracked)
            case Completed() | Failed() if not getattr(event, "retryable", False):
                del self._tracked[key]
                if not any(k[0] == event.rollout_id for k in self._tracked):
                    self._paces.pop(event.rollout_id, None)
        return []

    def _pace_of(self, rollout_id: str) -> float:
        pace = self._paces.get(rollout_id, Pace())
        config = self.config
        return pace.seconds_per_token(config.seconds_per_token, config.min_measured_tokens)

    def _set_by_operator(
        self, event: TrajectoryReprioritizeRequested, tracked: _Tracked
    ) -> list[Output]:
        tracked.priority = event.priority
        tracked.is_pinned = event.pin
        prioritized = self._prioritized(event, tracked, event.event_id)
        if not (tracked.is_generating and tracked.worker_id):
            return [prioritized]
        return [prioritized, self._reprioritize(event, tracked, prioritized.event_id)]

    def _update(self, event: TrajectoryEvent, tracked: _Tracked) -> list[Output]:
        if tracked.is_pinned:
            return []
        priority = self.policy.priority(tracked.facts(self._pace_of(event.rollout_id)))
        if not self._is_meaningful(tracked.priority, priority):
            return []
        tracked.priority = priority
        prioritized = self._prioritized(event, tracked, type(event).kind_name())
        if not (tracked.is_generating and tracked.worker_id):
            return [prioritized]
        return [prioritized, self._reprioritize(event, tracked, prioritized.event_id)]

    def _reprioritize(
        self, event: TrajectoryEvent, tracked: _Tracked, cause_id: str
    ) -> Reprioritize:
        """Tell the trajectory's worker its current priority."""
        return Reprioritize(
            command_id=derive_id(cause_id, "reprioritize"),
            rollout_id=event.rollout_id,
            issued_at=event.occurred_at,
            worker_id=tracked.worker_id,
            traj_id=event.traj_id,
            priority=tracked.priority,
        )

    def _is_meaningful(self, old: float, new: float) -> bool:
        gap = max(self.config.min_absolute_change, self.config.min_relative_change * abs(old))
        return abs(new - old) > gap or (gap == 0.0 and new != old)

    def _prioritized(self, event: Event, tracked: _Tracked, cause: str) -> Prioritized:
        traj_id = getattr(event, "traj_id", "")
        step = getattr(event, "step", -1)
        return Prioritized(
            event_id=derive_id(event.rollout_id, traj_id, step, cause, "prioritized"),
            rollout_id=event.rollout_id,
            occurred_at=event.occurred_at,
            traj_id=traj_id,
            worker_id=tracked.worker_id,
            priority=tracked.priority,
        )

    def snapshot(self) -> dict[tuple[str, str], tuple[TrajectoryFacts, float, str, bool]]:
        """The state, as a comparable value (replay tests)."""
        return {
            k: (v.facts(self._pace_of(k[0])), v.priority, v.worker_id, v.is_generating)
            for k, v in self._tracked.items()
        }
