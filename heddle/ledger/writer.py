"""Projection writes: a batch of events and the consumer's stream position in ONE transaction.

``LedgerWriter.project`` skips events at or below the stored position (a redelivery after a
crash), loads the rows the rest touch, folds the events into them (``heddle.ledger.fold``),
writes each table with one statement and moves the position with a compare-and-set: if another
writer moved it meanwhile, nothing is written and ``PositionConflict`` is raised. Exactly-once
projection of an at-least-once stream follows.

A batch must also *continue* the position: the caller names the stream sequence the batch starts
at (its first record, or earlier when the caller knows the sequences before that record hold
nothing to project: dead-lettered, expired, outside the consumer's filter). A batch starting
beyond ``position + 1`` is refused with ``PositionGap``: otherwise, with two projectors on one
durable, a later batch could be committed first and the batch in between then skipped as
"already projected".

Rows of trajectories, rollouts and workers stay cached between batches (the writer is the only
one changing them); the cache is dropped whenever a transaction fails. A step row is read from
the database only when its trajectory already went past that step: new steps cannot exist yet.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Connection, Table, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError

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
from heddle.events.subjects import EVENTS_STREAM
from heddle.events.trajectory import TrajectoryEvent
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.database import Ledger
from heddle.ledger.fold import apply
from heddle.ledger.fold_steps import STEP_EVENTS
from heddle.ledger.rows import (
    MigrationRow,
    RolloutRow,
    StepKey,
    StepRow,
    TrajectoryKey,
    TrajectoryRow,
    WorkerRow,
)
from heddle.ledger.tables import (
    ConsumerPosition,
    DeadLetter,
    Migration,
    OperatorAction,
    Placement,
    Prediction,
    Rollout,
    Step,
    Trajectory,
    Worker,
)
from heddle.ledger.upserts import Upserts

R = TypeVar("R", bound=msgspec.Struct)
_KEYS_PER_QUERY = 400
MAX_CACHED_TRAJECTORIES = 200_000

_rollouts: Table = Rollout.__table__  # type: ignore[assignment]
_trajectories: Table = Trajectory.__table__  # type: ignore[assignment]
_steps: Table = Step.__table__  # type: ignore[assignment]
_workers: Table = Worker.__table__  # type: ignore[assignment]
_migrations: Table = Migration.__table__  # type: ignore[assignment]
_placements: Table = Placement.__table__  # type: ignore[assignment]
_predictions: Table = Prediction.__table__  # type: ignore[assignment]
_dead_letters: Table = DeadLetter.__table__  # type: ignore[assignment]
_operator_actions: Table = OperatorAction.__table__  # type: ignore[assignment]
_positions: Table = ConsumerPosition.__table__  # type: ignore[assignment]


LEDGER_CONSUMER = "ledger"
"""The ledger projector's durable consumer, and the key of its position row."""


class PositionConflict(RuntimeError):
    """Another writer moved the consumer's position: this batch was not written."""


class PositionGap(PositionConflict):
    """The batch does not continue the position (sequences in between were never projected):
    this batch was not written. Retry from ``position + 1``."""

    def __init__(self, consumer: str, position: int, first_sequence: int) -> None:
        super().__init__(
            f"consumer {consumer}: batch starts at {first_sequence}, "
            f"but the position is {position} (sequences in between not projected)"
        )
        self.position = position
        self.first_sequence = first_sequence


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
    workers: dict[str, WorkerRow] = field(default_factory=dict)


class LedgerWriter:
    """Projects events into ``ledger`` as consumer ``consumer`` of ``stream``."""

    def __init__(self, ledger: Ledger, consumer: str, stream: str = EVENTS_STREAM) -> None:
        self.ledger = ledger
        self.consumer = consumer
        self.stream = stream
        self._cache = _Cache()
        self._upserts = Upserts(ledger.engine.dialect)
        self._position = self._read_position()

    @property
    def position(self) -> int:
        """The last stream sequence projected (0: none)."""
        return self._position

    def project(
        self, records: Sequence[tuple[int, EventT]], *, first_sequence: int | None = None
    ) -> int:
        """Apply the records above the position (in stream order) and store the new position,
        in one transaction; returns how many were applied.

        ``first_sequence`` (default: the first record's) is where the batch starts: the caller
        vouches that sequences from it up to the first record hold nothing to project. Raises
        ``PositionGap`` when it lies beyond ``position + 1``, ``PositionConflict`` when another
        writer moved the position meanwhile; nothing is written then."""
        fresh = self._continuing(records, first_sequence)
        if not fresh:
            return 0
        events = [event for _, event in fresh]
        try:
            with self.ledger.engine.begin() as connection:
                rows = self._load(connection, events)
                for event in events:
                    apply(rows, event)
                self._write(connection, rows)
                self._advance(connection, fresh[-1][0], len(fresh))
        except PositionConflict:
            self._cache = _Cache()
            self._position = self._read_position()
            raise
        except BaseException:
            self._cache = _Cache()
            raise
        self._remember(rows)
        self._position = fresh[-1][0]
        return len(fresh)

    def _continuing(
        self, records: Sequence[tuple[int, EventT]], first_sequence: int | None
    ) -> list[tuple[int, EventT]]:
        """The records above the position, or ``PositionGap`` when the batch starts past it."""
        if any(later <= earlier for (earlier, _), (later, _) in itertools.pairwise(records)):
            raise ValueError("records must come in increasing stream order")
        if not records or records[-1][0] <= self._position:
            return []
        start = records[0][0] if first_sequence is None else first_sequence
        if start > records[0][0]:
            raise ValueError(f"first_sequence {start} lies after the first record")
        if start > self._position + 1:
            # Another writer may have moved the position (and the rows): re-read, drop the
            # cache, and go on only when the batch continues the stored position.
            self._cache = _Cache()
            self._position = self._read_position()
            if start > self._position + 1:
                raise PositionGap(self.consumer, self._position, start)
        return [(seq, event) for seq, event in records if seq > self._position]

    def _read_position(self) -> int:
        """The stored position, creating the row (at 0) for a new consumer."""
        query = select(_positions.c.stream_sequence).where(_positions.c.consumer == self.consumer)
        with self.ledger.engine.begin() as connection:
            stored = connection.execute(query).scalar()
        if stored is not None:
            return int(stored)
        row = {
            "consumer": self.consumer,
            "stream": self.stream,
            "stream_sequence": 0,
            "num_events": 0,
            "updated_at": time.time(),
        }
        try:
            with self.ledger.engine.begin() as connection:
                connection.execute(insert(_positions).values(**row))
        except IntegrityError:
            pass  # another writer of the same consumer created it meanwhile
        with self.ledger.engine.begin() as connection:
            return int(connection.execute(query).scalar_one())

    def _advance(self, connection: Connection, sequence: int, num_events: int) -> None:
        result = connection.execute(
            update(_positions)
            .where(
                _positions.c.consumer == self.consumer,
                _positions.c.stream_sequence == self._position,
            )
            .values(
                stream_sequence=sequence,
                num_events=_positions.c.num_events + num_events,
                updated_at=time.time(),
            )
        )
        if result.rowcount != 1:
            raise PositionConflict(
                f"consumer {self.consumer}: position moved past {self._position} by another writer"
            )

    # ---- loading ------------------------------------------------------------------------

    def _load(self, connection: Connection, events: list[EventT]) -> BatchRows:
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
        existing_steps = [key for key in keys.steps if _may_exist(rows, key)]
        rows.steps = _select_rows(
            connection, _steps, StepRow, existing_steps, ("rollout_id", "traj_id", "step")
        )
        if keys.migrating:
            rows.migrations = _open_migrations(connection, keys.migrating)
        return rows

    def _remember(self, rows: BatchRows) -> None:
        cache = self._cache
        if len(cache.trajectories) + len(rows.trajectories) > MAX_CACHED_TRAJECTORIES:
            cache.trajectories.clear()
        cache.rollouts.update(rows.rollouts)
        cache.trajectories.update(rows.trajectories)
        cache.workers.update(rows.workers)

    # ---- writing ------------------------------------------------------------------------

    def _write(self, connection: Connection, rows: BatchRows) -> None:
        upserts = self._upserts
        upserts.replace(connection, _rollouts, rows.rollouts.values())
        upserts.replace(connection, _trajectories, rows.trajectories.values())
        upserts.replace(connection, _steps, rows.steps.values())
        upserts.replace(connection, _workers, rows.workers.values())
        upserts.replace(connection, _migrations, rows.migrations.values())
        upserts.keep_first(connection, _placements, rows.placements)
        upserts.keep_first(connection, _predictions, rows.predictions)
        upserts.keep_first(connection, _dead_letters, rows.dead_letters)
        upserts.keep_first(connection, _operator_actions, rows.operator_actions)


def _keys_of(events: list[EventT]) -> _Keys:
    keys = _Keys()
    for event in events:
        if isinstance(event, WorkerUndrainRequested):
            keys.workers.add(event.worker_id)  # a drained worker's row turns active again
            continue
        if isinstance(event, OPERATOR_EVENTS):
            continue  # recorded as an action only: no row of its target is read or written
        if isinstance(event, TrajectoryEvent):
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
    if not keys:
        return found
    columns = [table.c[name] for name in key_columns]
    target = columns[0] if len(columns) == 1 else tuple_(*columns)
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[start : start + _KEYS_PER_QUERY]
        for record in connection.execute(select(table).where(target.in_(chunk))).mappings():
            row = row_type(**record)
            key = tuple(record[name] for name in key_columns)
            found[key[0] if len(key) == 1 else key] = row
    return found


def _open_migrations(
    connection: Connection, trajectories: set[TrajectoryKey]
) -> dict[str, MigrationRow]:
    found: dict[str, MigrationRow] = {}
    target = tuple_(_migrations.c.rollout_id, _migrations.c.traj_id)
    keys = list(trajectories)
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        query = select(_migrations).where(
            target.in_(keys[start : start + _KEYS_PER_QUERY]),
            _migrations.c.status == "requested",
        )
        for record in connection.execute(query).mappings():
            found[record["event_id"]] = MigrationRow(**record)
    return found
