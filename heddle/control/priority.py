"""The priority decider: turns trajectory facts into priorities under one policy.

Facts (``heddle.policy.priority.TrajectoryFacts``) come from events: the submission time
(``TrajectorySubmitted``), the latest prediction (``Predicted``), attained service (``Generated``:
output tokens, prefill + decode seconds), and the arrival of the current step's request
(``ToolReturned``; the submission for step 0). Where the trajectory lives comes from
``TrajectoryPlaced`` and ``Migrated``; whether it is generating from ``ToolCalled`` /
``ToolReturned`` / ``TrajectoryPlaced``.

When a trajectory's priority changes by more than the hysteresis (``min_relative_change`` of the
old value, at least ``min_absolute_change``), it emits ``Prioritized`` (the router reads it to
stamp the next step's request) and, only while the trajectory has a request on a worker, a
``Reprioritize`` command: in a tool gap the next request carries the new priority anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from heddle.control.decider import Output
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
    TrajectoryPlaced,
    TrajectorySubmitted,
)
from heddle.ids import derive_id
from heddle.policy.priority import PriorityPolicy, TrajectoryFacts


@dataclass(frozen=True, slots=True)
class PriorityConfig:
    min_relative_change: float = 0.0
    """Emit only when the priority moved by more than this fraction of its old magnitude."""
    min_absolute_change: float = 0.0
    """... and by more than this much."""

    def __post_init__(self) -> None:
        if self.min_relative_change < 0 or self.min_absolute_change < 0:
            raise ValueError("priority hysteresis must be >= 0")


@dataclass(slots=True)
class _Tracked:
    facts: TrajectoryFacts
    priority: float
    worker_id: str = ""
    is_generating: bool = True
    """Between the step's request and its tool call (or before the first step)."""


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
        }
    )

    def __init__(self, policy: PriorityPolicy, config: PriorityConfig | None = None) -> None:
        self.policy = policy
        self.config = config or PriorityConfig()
        self._tracked: dict[tuple[str, str], _Tracked] = {}
        """(rollout id, trajectory id) -> facts (trajectory ids repeat across rollouts)."""

    def priority_of(self, rollout_id: str, traj_id: str) -> float | None:
        tracked = self._tracked.get((rollout_id, traj_id))
        return None if tracked is None else tracked.priority

    def decide(self, event: Event) -> list[Output]:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        match event:
            case TrajectorySubmitted():
                if key in self._tracked:
                    return []
                at = event.occurred_at
                facts = TrajectoryFacts(arrival_s=at, step_arrival_s=at)
                fresh = _Tracked(facts, self.policy.priority(facts))
                self._tracked[key] = fresh
                return [self._prioritized(event, fresh, "submitted")]
            case Predicted():
                return self._update(
                    event, predicted_remaining_tokens=event.predicted_remaining_tokens
                )
            case Generated():
                tracked = self._tracked.get(key)
                if tracked is None:
                    return []
                facts = tracked.facts
                return self._update(
                    event,
                    attained_service_tokens=facts.attained_service_tokens
                    + len(event.output_token_ids),
                    attained_service_s=facts.attained_service_s + event.prefill_s + event.decode_s,
                )
            case ToolCalled():
                self._set_generating(key, False)
                return []
            case ToolReturned():
                self._set_generating(key, True)
                return self._update(event, step_arrival_s=event.occurred_at)
            case TrajectoryPlaced():
                self._set_worker(key, event.worker_id)
                return []
            case Migrated():
                self._set_worker(key, event.target_worker_id)
                return []
            case Completed() | Failed():
                self._tracked.pop(key, None)
                return []
        return []

    def _update(self, event: Event, **changes: float) -> list[Output]:
        traj_id = getattr(event, "traj_id", "")
        tracked = self._tracked.get((event.rollout_id, traj_id))
        if tracked is None:
            return []
        tracked.facts = replace(tracked.facts, **changes)
        priority = self.policy.priority(tracked.facts)
        if not self._is_meaningful(tracked.priority, priority):
            return []
        tracked.priority = priority
        outputs: list[Output] = [self._prioritized(event, tracked, type(event).kind_name())]
        if tracked.is_generating and tracked.worker_id:
            outputs.append(
                Reprioritize(
                    command_id=derive_id(outputs[0].event_id, "reprioritize"),  # type: ignore[union-attr]
                    rollout_id=event.rollout_id,
                    issued_at=event.occurred_at,
                    worker_id=tracked.worker_id,
                    traj_id=traj_id,
                    priority=priority,
                )
            )
        return outputs

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

    def _set_generating(self, key: tuple[str, str], is_generating: bool) -> None:
        tracked = self._tracked.get(key)
        if tracked is not None:
            tracked.is_generating = is_generating

    def _set_worker(self, key: tuple[str, str], worker_id: str) -> None:
        tracked = self._tracked.get(key)
        if tracked is not None:
            tracked.worker_id = worker_id

    def snapshot(self) -> dict[tuple[str, str], tuple[TrajectoryFacts, float, str, bool]]:
        """The state, as a comparable value (replay tests)."""
        return {
            k: (v.facts, v.priority, v.worker_id, v.is_generating) for k, v in self._tracked.items()
        }
