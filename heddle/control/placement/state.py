"""The placement decider's records, shared by its strategies: the live workers, their in-flight
requests and which of them drain, and per rollout its trajectories, first predictions and
placer."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.control.placement.placer import Placer, WorkerInfo
from heddle.control.placement.weight_swaps import WeightSwaps
from heddle.events import Predicted, Prioritized, ToolReturned, TrajectorySpec


def is_first_prediction(event: Predicted) -> bool:
    """Whether the prediction came before the trajectory's first generation (``step = -1``)."""
    return event.step < 0


@dataclass(slots=True)
class TrajectoryRecord:
    spec: TrajectorySpec
    worker_id: str = ""
    priority: float = 0.0
    context_tokens: int = 0
    output_tokens: int = 0
    """Tokens generated so far: with the predicted remaining, the predicted total length."""
    tool_s: float = 0.0
    """Tool seconds so far (the predicted total length counts tools too)."""
    step: int = 0
    """The step it runs next (or is running)."""
    is_generating: bool = False
    kv_version: int = 0
    """The weight version of its last generation: the one its KV was computed under."""
    requested_target: str = ""
    """The target of the last MigrationRequested not yet Migrated ("" when none)."""
    rank: int = 0
    """Rank in the initial placement (presorted: 0 = predicted longest)."""
    held_step: ToolReturned | None = None
    """The tool result of the step admission holds (``Admission.holds_step``), to be fed to it
    when admission resumes it (None: no step held)."""
    epoch: int = 0
    """The last hosting number granted (placements and migration requests take the next)."""

    def next_epoch(self) -> int:
        """A new hosting number, above every one granted before (``heddle.control.leases``)."""
        self.epoch += 1
        return self.epoch


@dataclass(slots=True)
class RolloutRecord:
    num_trajectories: int | None = None
    """None until RolloutSubmitted arrives."""
    trajectories: dict[str, TrajectoryRecord] = field(default_factory=dict)
    first_predictions: dict[str, float] = field(default_factory=dict)
    first_tool_predictions: dict[str, float] = field(default_factory=dict)
    submitted_at: float = 0.0
    priorities: dict[str, float] = field(default_factory=dict)
    """Priorities seen before placement (the trajectory record takes over afterwards)."""
    placer: Placer | None = None
    """Set when the rollout is placed."""
    awaited: set[str] = field(default_factory=set)
    """Resubmissions a stale trajectory's ``Failed`` announced, not yet submitted: the rollout
    does not end before they do."""
    late: set[str] = field(default_factory=set)
    """Trajectories submitted after the rollout was placed (resubmissions), waiting for their
    first prediction to be planned."""
    refused: set[str] = field(default_factory=set)
    """Trajectories that ended before the rollout was placed, never submitted (their
    submission was dead-lettered): the others need not wait for them."""

    def has_all_trajectories(self) -> bool:
        return len(self.trajectories) + len(self.refused) == self.num_trajectories

    def has_all_first_predictions(self) -> bool:
        return len(self.first_predictions) + len(self.refused) == self.num_trajectories


class PlacementState:
    """Workers and rollouts; the strategies read and update them in place."""

    def __init__(self, weights: WeightSwaps | None = None) -> None:
        self.weights = weights if weights is not None else WeightSwaps()
        """Which workers must swap weights, and whose KV a swap makes stale."""
        self.workers: dict[str, WorkerInfo] = {}
        self.in_flight: dict[str, int] = {}
        """Per worker, the trajectories generating there (the routers' load)."""
        self.draining: set[str] = set()
        """Workers an operator drains: they get no new trajectories."""
        self.resharding: dict[str, str] = {}
        """Members of a re-shard in progress, each to its leader (the leader to itself): no
        migration leaves or targets them until the leader registers at its new degree."""
        self.rollouts: dict[str, RolloutRecord] = {}
        self.ended: set[str] = set()
        """Rollouts whose trajectories all ended: their state is dropped, their events ignored
        (a redelivered submission must not place them again)."""

    def candidates(self) -> dict[str, WorkerInfo]:
        """The workers that may take new trajectories (all but the draining)."""
        if not self.draining:
            return self.workers
        return {w: info for w, info in self.workers.items() if w not in self.draining}

    def add_worker(self, worker_id: str, tp_degree: int) -> bool:
        """Register a worker; False when it is known already."""
        if worker_id in self.workers:
            return False
        self.workers[worker_id] = WorkerInfo(worker_id, tp_degree)
        self.in_flight[worker_id] = 0
        return True

    def resize_worker(self, worker_id: str, tp_degree: int) -> bool:
        """A known worker registered again; True when its TP degree changed."""
        info = self.workers[worker_id]
        if info.tp_degree == tp_degree:
            return False
        self.workers[worker_id] = WorkerInfo(worker_id, tp_degree)
        return True

    def rollout(self, rollout_id: str) -> RolloutRecord:
        """The rollout's record, made on first sight."""
        rollout = self.rollouts.get(rollout_id)
        if rollout is None:
            rollout = self.rollouts[rollout_id] = RolloutRecord()
        return rollout

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryRecord | None:
        rollout = self.rollouts.get(rollout_id)
        return rollout.trajectories.get(traj_id) if rollout else None

    def set_priority(self, event: Prioritized) -> None:
        """The priority of the trajectory's next request (kept aside until it is placed)."""
        rollout = self.rollout(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id)
        if trajectory is not None and rollout.placer is not None:
            trajectory.priority = event.priority
        else:
            rollout.priorities[event.traj_id] = event.priority

    def stop_generating(self, trajectory: TrajectoryRecord) -> None:
        """The trajectory leaves its worker's in-flight requests (if it was in them)."""
        if trajectory.is_generating:
            trajectory.is_generating = False
            if trajectory.worker_id in self.in_flight:
                self.in_flight[trajectory.worker_id] -= 1

    def snapshot(self) -> tuple[object, ...]:
        """Workers, in-flight counts, and per rollout its trajectories, first predictions and the
        placer's view of them; ended rollouts; draining workers; weight swaps; re-sharding
        members."""
        rollouts = {
            rollout_id: (
                rollout.num_trajectories,
                dict(rollout.trajectories),
                dict(rollout.first_predictions),
                rollout.placer.snapshot() if rollout.placer is not None else None,
                frozenset(rollout.awaited),
                frozenset(rollout.late),
            )
            for rollout_id, rollout in self.rollouts.items()
        }
        workers, draining = dict(self.workers), frozenset(self.draining)
        ended = frozenset(self.ended)
        resharding = frozenset(self.resharding.items())
        weights = self.weights.snapshot()
        return workers, dict(self.in_flight), rollouts, ended, draining, weights, resharding
