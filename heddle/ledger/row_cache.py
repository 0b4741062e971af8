"""The rows a batch of events touches, loaded for ``heddle.ledger.writer.LedgerWriter``.

Rows of trajectories, rollouts and workers stay cached between batches (the writer is the only
one changing them; it drops the cache whenever a transaction fails), and so does each cached
trajectory's latest step row: a step's events (generation started, generated, tool called, tool
returned) usually arrive in different batches. Another step row is read from the database only
when its trajectory already went past that step: new steps cannot exist yet. Open migrations are
read for the trajectories a ``Migrated`` event closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Connection, Table, select

from heddle.events import (
    OPERATOR_EVENTS,
    DeadLettered,
    EventT,
    ExecutorRegistered,
    Migrated,
    RolloutEvent,
    WeightsLoaded,
    WeightsLoadFailed,
    WeightsPublished,
    WorkerEvent,
    WorkerUndrainRequested,
)
from heddle.events.trajectory import TrajectoryEvent
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.fold_steps import STEP_EVENTS
from heddle.ledger.keyed_reads import rows_by_key
from heddle.ledger.rows import (
    MigrationRow,
    RolloutRow,
    StepKey,
    StepRow,
    TrajectoryKey,
    TrajectoryRow,
    WorkerRow,
)
from heddle.ledger.statuses import MigrationStatus
from heddle.ledger.tables import Migration, Rollout, Step, Trajectory, Worker

R = TypeVar("R", bound=msgspec.Struct)
_KEYS_PER_QUERY = 400
MAX_CACHED_TRAJECTORIES = 200_000

_rollouts: Table = Rollout.__table__  # type: ignore[assignment]
_trajectories: Table = Trajectory.__table__  # type: ignore[assignment]
_steps: Table = Step.__table__  # type: ignore[assignment]
_workers: Table = Worker.__table__  # type: ignore[assignment]
_migrations: Table = Migration.__table__  # type: ignore[assignment]


@dataclass(slots=True)
class _Keys:
    rollouts: set[str] = field(default_factory=set)
    trajectories: set[TrajectoryKey] = field(default_factory=set)
    steps: set[StepKey] = field(default_factory=set)
    workers: set[str] = field(default_factory=set)
    migrating: set[TrajectoryKey] = field(default_factory=set)


@dataclass(slots=True)
class _Cache:
    rollouts: dict[str, RolloutRow] = field(default_factory=dict)
    trajectories: dict[TrajectoryKey, TrajectoryRow] = field(default_factory=dict)
    latest_steps: dict[TrajectoryKey, StepRow] = field(default_factory=dict)
    """The highest step row stored of each cached trajectory."""
    workers: dict[str, WorkerRow] = field(default_factory=dict)


class RowCache:
    """Loads a batch's rows, keeping rollouts, trajectories and workers between batches."""

    def __init__(self) -> None:
        self._cache = _Cache()

    def clear(self) -> None:
        """Forget every cached row (after a failed transaction or a moved position)."""
        self._cache = _Cache()

    def load(self, connection: Connection, events: list[EventT]) -> BatchRows:
        """The rows ``events`` touch that exist: from the cache, else the database."""
        keys = _keys_of(events)
        cache = self._cache
        rows = BatchRows()
        rows.rollouts = _cached(
            connection, _rollouts, RolloutRow, cache.rollouts, keys.rollouts, ("rollout_id",)
        )
        rows.workers = _cached(
            connection, _workers, WorkerRow, cache.workers, keys.workers, ("worker_id",)
        )
        rows.trajectories = _cached(
            connection,
            _trajectories,
            TrajectoryRow,
            cache.trajectories,
            keys.trajectories,
            ("rollout_id", "traj_id"),
        )
        steps: dict[StepKey, StepRow] = {}
        unknown: list[StepKey] = []
        for key in keys.steps:
            latest = cache.latest_steps.get((key[0], key[1]))
            if latest is not None and latest.step == key[2]:
                steps[key] = latest
            elif _may_exist(rows, key):
                unknown.append(key)
        steps.update(
            _select_rows(connection, _steps, StepRow, unknown, ("rollout_id", "traj_id", "step"))
        )
        rows.steps = steps
        if keys.migrating:
            rows.migrations = _open_migrations(connection, keys.migrating)
        return rows

    def remember(self, rows: BatchRows) -> None:
        """Keep a committed batch's rows for the next batches."""
        cache = self._cache
        if len(cache.trajectories) + len(rows.trajectories) > MAX_CACHED_TRAJECTORIES:
            cache.trajectories.clear()
            cache.latest_steps.clear()
        cache.rollouts.update(rows.rollouts)
        cache.trajectories.update(rows.trajectories)
        cache.workers.update(rows.workers)
        latest_steps = cache.latest_steps
        for (rollout_id, traj_id, number), step in rows.steps.items():
            latest = latest_steps.get((rollout_id, traj_id))
            if latest is None or number >= latest.step:
                latest_steps[(rollout_id, traj_id)] = step


def _keys_of(events: list[EventT]) -> _Keys:
    keys = _Keys()
    for event in events:
        if isinstance(event, WorkerUndrainRequested):
            keys.workers.add(event.worker_id)  # a drained worker's row turns active again
            continue
        if isinstance(event, OPERATOR_EVENTS):
            continue  # recorded as an action only: no row of its target is read or written
        if isinstance(event, TrajectoryEvent):
            keys.rollouts.add(event.rollout_id)  # its lease: the gate reads it
            keys.trajectories.add((event.rollout_id, event.traj_id))
            if isinstance(event, STEP_EVENTS):
                keys.steps.add((event.rollout_id, event.traj_id, event.step))
            elif isinstance(event, Migrated):
                keys.migrating.add((event.rollout_id, event.traj_id))
        elif isinstance(event, RolloutEvent):
            keys.rollouts.add(event.rollout_id)
        elif isinstance(event, (WorkerEvent, WeightsLoaded)):
            keys.workers.add(event.worker_id)
        elif isinstance(event, (WeightsPublished, WeightsLoadFailed)):
            continue
        else:
            assert isinstance(event, DeadLettered | ExecutorRegistered)
    return keys


def _may_exist(rows: BatchRows, key: StepKey) -> bool:
    trajectory = rows.trajectories.get((key[0], key[1]))
    return trajectory is not None and key[2] <= trajectory.last_step


def _cached(
    connection: Connection,
    table: Table,
    row_type: type[R],
    cache: dict[Any, R],
    keys: set[Any],
    key_columns: tuple[str, ...],
) -> dict[Any, R]:
    """The rows of ``keys`` that exist, from the cache or else the database (then cached)."""
    missing = [key for key in keys if key not in cache]
    if missing:
        cache.update(_select_rows(connection, table, row_type, missing, key_columns))
    return {key: cache[key] for key in keys if key in cache}


def _select_rows(
    connection: Connection,
    table: Table,
    row_type: type[R],
    keys: list[Any],
    key_columns: tuple[str, ...],
) -> dict[Any, R]:
    found: dict[Any, R] = {}
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[start : start + _KEYS_PER_QUERY]
        if len(key_columns) == 1:
            query = select(table).where(table.c[key_columns[0]].in_(chunk))
            records: Any = connection.execute(query).mappings()
        else:
            records = rows_by_key(connection, table, key_columns, chunk)
        for record in records:
            key = tuple(record[name] for name in key_columns)
            found[key[0] if len(key) == 1 else key] = row_type(**record)
    return found


def _open_migrations(
    connection: Connection, trajectories: set[TrajectoryKey]
) -> dict[str, MigrationRow]:
    """Migrations still requested of these trajectories."""
    found: dict[str, MigrationRow] = {}
    keys = list(trajectories)
    requested = (("status", MigrationStatus.REQUESTED.value),)
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[start : start + _KEYS_PER_QUERY]
        for record in rows_by_key(
            connection, _migrations, ("rollout_id", "traj_id"), chunk, equal=requested
        ):
            found[record["event_id"]] = MigrationRow(**record)
    return found
