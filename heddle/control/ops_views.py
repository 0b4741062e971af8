"""What the operations view (``heddle.control.operations``) knows of each rollout, trajectory
and worker, and their lifecycle states."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class TrajectoryState(StrEnum):
    WAITING = "waiting"
    """Submitted, not placed yet."""
    PLACED = "placed"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def is_finished(self) -> bool:
        return self in (TrajectoryState.COMPLETED, TrajectoryState.FAILED)


class RolloutState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class WorkerState(StrEnum):
    ACTIVE = "active"
    DRAINING = "draining"
    DRAINED = "drained"
    FAILED = "failed"
    RETIRED = "retired"
    """Left for a re-shard (its GPUs joined another worker)."""


@dataclass(slots=True)
class TrajectoryView:
    index: int
    state: TrajectoryState = TrajectoryState.WAITING
    worker_id: str = ""
    worker_history: list[str] = field(default_factory=list)
    priority: float = 0.0
    is_pinned: bool = False
    reason: str = ""
    """Why it failed."""
    operator_actions: list[str] = field(default_factory=list)
    """Ids of the operator events about it."""


@dataclass(slots=True)
class RolloutView:
    policy: str
    num_trajectories: int
    submitted_at: float
    state: RolloutState = RolloutState.RUNNING
    trajectories: dict[str, TrajectoryView] = field(default_factory=dict)
    reason: str = ""
    trainer: str = ""
    """The trainer that submitted it ("" for one submitted before owners were recorded)."""
    time_scale: float = 1.0

    def count(self, state: TrajectoryState) -> int:
        return sum(1 for t in self.trajectories.values() if t.state is state)


@dataclass(slots=True)
class WorkerView:
    engine: str
    state: WorkerState = WorkerState.ACTIVE
    trajectories: set[tuple[str, str]] = field(default_factory=set)
    time_scale: float = 1.0
    max_context_tokens: int = 0
    """0: the worker does not say."""
