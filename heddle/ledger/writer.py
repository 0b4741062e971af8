"""Projection writes: a batch of events and the consumer's stream position in ONE transaction.

``LedgerWriter.project`` skips events at or below the stored position (a redelivery after a
crash), loads the rows the rest touch, folds the events the event gate accepts into them
(``heddle.ledger.gated_fold``, ``heddle.ledger.fold``; a refused one leaves a dead-letter row),
writes each table with one statement and moves the position with a compare-and-set: if another
writer moved it meanwhile, nothing is written and ``PositionConflict`` is raised. Exactly-once
projection of an at-least-once stream follows.

A batch must also *continue* the position: the caller names the stream sequence the batch starts
at (its first record, or earlier when the caller knows the sequences before that record hold
nothing to project: dead-lettered, expired, outside the consumer's filter). A batch starting
beyond ``position + 1`` is refused with ``PositionGap``: otherwise, with two projectors on one
durable, a later batch could be committed first and the batch in between then skipped as
"already projected".

The rows a batch touches come from ``heddle.ledger.row_cache`` (rollouts, trajectories and
workers cached between batches); the cache is dropped whenever a transaction fails.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from sqlalchemy import Connection, Table, Update, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from heddle.events import (
    EventT,
)
from heddle.events.subjects import EVENTS_STREAM
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.database import Ledger
from heddle.ledger.gated_fold import fold_gated
from heddle.ledger.row_cache import RowCache
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


_ADVANCE: Update = (
    update(_positions)
    .where(
        _positions.c.consumer == bindparam("for_consumer"),
        _positions.c.stream_sequence == bindparam("from_sequence"),
    )
    .values(
        stream_sequence=bindparam("to_sequence"),
        num_events=_positions.c.num_events + bindparam("added_events"),
        updated_at=bindparam("now"),
    )
)
"""The compare-and-set of a consumer's position, built once: SQLAlchemy rebuilt and re-keyed a
fresh statement for every batch (a third of a small batch's cost, docs/benchmarks.md)."""


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


class LedgerWriter:
    """Projects events into ``ledger`` as consumer ``consumer`` of ``stream``."""

    def __init__(self, ledger: Ledger, consumer: str, stream: str = EVENTS_STREAM) -> None:
        self.ledger = ledger
        self.consumer = consumer
        self.stream = stream
        self._rows = RowCache()
        self._upserts = Upserts(ledger.engine.dialect)
        self._position = self._read_position()
        self.num_refused = 0
        """Events the gate refused since this writer was made (dead-letter rows)."""

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
                rows = self._rows.load(connection, events)
                self.num_refused += fold_gated(rows, fresh, self.stream)
                self._write(connection, rows)
                self._advance(connection, fresh[-1][0], len(fresh))
        except PositionConflict:
            self._rows.clear()
            self._position = self._read_position()
            raise
        except BaseException:
            self._rows.clear()
            raise
        self._rows.remember(rows)
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
            self._rows.clear()
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
        parameters = {
            "for_consumer": self.consumer,
            "from_sequence": self._position,
            "to_sequence": sequence,
            "added_events": num_events,
            "now": time.time(),
        }
        result = connection.execute(_ADVANCE, parameters)
        if result.rowcount != 1:
            raise PositionConflict(
                f"consumer {self.consumer}: position moved past {self._position} by another writer"
            )

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
