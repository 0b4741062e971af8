"""Read queries for the CLI, ``heddle status``, the trainer client and deciders' start-up.

Results are row snapshots (``heddle.ledger.rows``) or small summaries; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Select, Table, func, select

from heddle.ledger.database import Ledger
from heddle.ledger.rows import (
    DeadLetterRow,
    OperatorActionRow,
    RolloutRow,
    StepRow,
    TrajectoryRow,
    WorkerRow,
)
from heddle.ledger.statuses import TrajectoryStatus
from heddle.ledger.tables import (
    ConsumerPosition,
    DeadLetter,
    OperatorAction,
    Rollout,
    Step,
    Trajectory,
    Worker,
)

R = TypeVar("R", bound=msgspec.Struct)

_rollouts: Table = Rollout.__table__  # type: ignore[assignment]
_trajectories: Table = Trajectory.__table__  # type: ignore[assignment]
_steps: Table = Step.__table__  # type: ignore[assignment]
_workers: Table = Worker.__table__  # type: ignore[assignment]
_positions: Table = ConsumerPosition.__table__  # type: ignore[assignment]
_dead_letters: Table = DeadLetter.__table__  # type: ignore[assignment]
_operator_actions: Table = OperatorAction.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class RolloutTotals:
    rollout_id: str
    rollout: RolloutRow | None
    """The rollout's own row (None when its ``rollout.submitted`` event was not projected)."""
    num_trajectories: int
    """Trajectories seen in the ledger."""
    num_by_status: dict[TrajectoryStatus, int]
    num_steps: int
    num_output_tokens: int
    first_submitted_at: float | None
    last_completed_at: float | None

    @property
    def num_completed(self) -> int:
        return self.num_by_status.get(TrajectoryStatus.COMPLETED, 0)

    @property
    def wall_span_s(self) -> float | None:
        """Publisher-clock seconds from the first submission to the last completion."""
        if self.first_submitted_at is None or self.last_completed_at is None:
            return None
        return self.last_completed_at - self.first_submitted_at


@dataclass(frozen=True, slots=True)
class Position:
    consumer: str
    stream: str
    stream_sequence: int
    num_events: int
    updated_at: float


def rollout_ids(ledger: Ledger, *, limit: int = 50) -> list[str]:
    """Rollouts with their own row or trajectories, most recently submitted first."""
    with ledger.engine.connect() as connection:
        known = connection.execute(
            select(_rollouts.c.rollout_id).order_by(_rollouts.c.submitted_at.desc()).limit(limit)
        ).scalars()
        ids = list(known)
        others = connection.execute(
            select(_trajectories.c.rollout_id)
            .group_by(_trajectories.c.rollout_id)
            .order_by(func.max(_trajectories.c.updated_at).desc())
            .limit(limit)
        ).scalars()
    return (ids + [rollout for rollout in others if rollout not in ids])[:limit]


def rollouts(ledger: Ledger) -> list[RolloutRow]:
    """Every rollout row, oldest submission first (retention's candidates)."""
    query = select(_rollouts).order_by(_rollouts.c.submitted_at, _rollouts.c.rollout_id)
    return _all(ledger, query, RolloutRow)


def rollout_totals(ledger: Ledger, rollout_id: str) -> RolloutTotals | None:
    """Counts and totals of one rollout; None when the ledger knows nothing of it."""
    t = _trajectories
    with ledger.engine.connect() as connection:
        rollout = _one(
            connection.execute(select(_rollouts).where(_rollouts.c.rollout_id == rollout_id)),
            RolloutRow,
        )
        by_status: dict[str, int] = dict(
            connection.execute(
                select(t.c.status, func.count())
                .where(t.c.rollout_id == rollout_id)
                .group_by(t.c.status)
            ).all()
        )
        totals = connection.execute(
            select(
                func.coalesce(func.sum(t.c.num_steps), 0),
                func.coalesce(func.sum(t.c.num_output_tokens), 0),
                func.min(t.c.submitted_at),
                func.max(t.c.completed_at),
            ).where(t.c.rollout_id == rollout_id)
        ).one()
    if rollout is None and not by_status:
        return None
    return RolloutTotals(
        rollout_id=rollout_id,
        rollout=rollout,
        num_trajectories=sum(by_status.values()),
        num_by_status={TrajectoryStatus(k): int(v) for k, v in by_status.items()},
        num_steps=int(totals[0]),
        num_output_tokens=int(totals[1]),
        first_submitted_at=totals[2],
        last_completed_at=totals[3],
    )


def trajectories(ledger: Ledger, rollout_id: str) -> list[TrajectoryRow]:
    """A rollout's trajectories in submission order (then by id)."""
    t = _trajectories
    query = select(t).where(t.c.rollout_id == rollout_id).order_by(t.c.traj_index, t.c.traj_id)
    return _all(ledger, query, TrajectoryRow)


def steps(ledger: Ledger, rollout_id: str, traj_id: str | None = None) -> list[StepRow]:
    """Steps of a rollout (or of one trajectory), by trajectory then step."""
    s = _steps
    query = select(s).where(s.c.rollout_id == rollout_id)
    if traj_id is not None:
        query = query.where(s.c.traj_id == traj_id)
    return _all(ledger, query.order_by(s.c.traj_id, s.c.step), StepRow)


def workers(ledger: Ledger) -> list[WorkerRow]:
    return _all(ledger, select(_workers).order_by(_workers.c.worker_id), WorkerRow)


def positions(ledger: Ledger) -> list[Position]:
    with ledger.engine.connect() as connection:
        result = connection.execute(select(_positions).order_by(_positions.c.consumer))
        return [Position(**record) for record in result.mappings()]


def dead_letters(ledger: Ledger, *, limit: int = 100) -> list[DeadLetterRow]:
    """The most recent dead letters first."""
    d = _dead_letters
    return _all(ledger, select(d).order_by(d.c.recorded_at.desc()).limit(limit), DeadLetterRow)


def operator_actions(
    ledger: Ledger, *, rollout_id: str | None = None, limit: int = 100
) -> list[OperatorActionRow]:
    """Operators' steering requests, oldest first (one rollout's when given)."""
    o = _operator_actions
    query = select(o).order_by(o.c.requested_at, o.c.event_id).limit(limit)
    if rollout_id is not None:
        query = query.where(o.c.rollout_id == rollout_id)
    return _all(ledger, query, OperatorActionRow)


def num_dead_letters(ledger: Ledger) -> int:
    """How many messages consumers dead-lettered (``heddle status``)."""
    with ledger.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(_dead_letters)).scalar_one())


def _all(ledger: Ledger, query: Select[Any], row_type: type[R]) -> list[R]:
    with ledger.engine.connect() as connection:
        return [row_type(**record) for record in connection.execute(query).mappings()]


def _one(result: Any, row_type: type[R]) -> R | None:
    record = result.mappings().first()
    return None if record is None else row_type(**record)
