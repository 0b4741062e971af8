"""``BatchRows``: the rows one projected batch touches, by primary key."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.ledger.rows import (
    DeadLetterRow,
    MigrationRow,
    OperatorActionRow,
    PlacementRow,
    PredictionRow,
    RolloutRow,
    StepKey,
    StepRow,
    TrajectoryKey,
    TrajectoryRow,
    WorkerRow,
)


@dataclass(slots=True)
class BatchRows:
    """Rows touched by one batch, by primary key; missing rows are created with defaults."""

    rollouts: dict[str, RolloutRow] = field(default_factory=dict)
    trajectories: dict[TrajectoryKey, TrajectoryRow] = field(default_factory=dict)
    steps: dict[StepKey, StepRow] = field(default_factory=dict)
    workers: dict[str, WorkerRow] = field(default_factory=dict)
    migrations: dict[str, MigrationRow] = field(default_factory=dict)
    """By event id: open migrations of the batch's migrating trajectories, and new ones."""
    placements: list[PlacementRow] = field(default_factory=list)
    predictions: list[PredictionRow] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    operator_actions: list[OperatorActionRow] = field(default_factory=list)

    def rollout(self, rollout_id: str) -> RolloutRow:
        row = self.rollouts.get(rollout_id)
        if row is None:
            row = self.rollouts[rollout_id] = RolloutRow(rollout_id=rollout_id)
        return row

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryRow:
        key = (rollout_id, traj_id)
        row = self.trajectories.get(key)
        if row is None:
            row = self.trajectories[key] = TrajectoryRow(rollout_id=rollout_id, traj_id=traj_id)
        return row

    def step(self, rollout_id: str, traj_id: str, step: int) -> StepRow:
        key = (rollout_id, traj_id, step)
        row = self.steps.get(key)
        if row is None:
            row = self.steps[key] = StepRow(rollout_id=rollout_id, traj_id=traj_id, step=step)
        return row

    def worker(self, worker_id: str) -> WorkerRow:
        row = self.workers.get(worker_id)
        if row is None:
            row = self.workers[worker_id] = WorkerRow(worker_id=worker_id)
        return row
