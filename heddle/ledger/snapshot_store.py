"""Ledger snapshots: the projected tables as of one stream position, kept in the object store
(``heddle.bus.snapshots``) so that a stream whose old rollouts were purged still rebuilds the
same ledger.

A snapshot is a SQLite database (gzip-compressed) holding the projected tables and one
``consumer_positions`` row: the stream sequence ``S`` it is as of. It is made from a replay's
own rebuild once that rebuild matched the live ledger (``heddle.lifecycle.purge``), and purges
remove events up to ``S`` only. Then:

- ``heddle replay`` starts from the latest snapshot and folds the events after ``S``
  (``seed_file``), so ``--verify`` still compares like with like;
- a control plane whose ledger is empty restores the latest snapshot into it (``restore``) and
  its projector continues after ``S``.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from sqlalchemy import Connection, Table, delete, func, insert, select

from heddle.ledger.database import Ledger, open_ledger
from heddle.ledger.tables import PROJECTED_TABLES, ConsumerPosition
from heddle.ledger.writer import LEDGER_CONSUMER

_positions: Table = ConsumerPosition.__table__  # type: ignore[assignment]
_TABLES: tuple[Table, ...] = PROJECTED_TABLES  # type: ignore[assignment]
_COPY_ROWS = 2000


def sqlite_bytes(ledger: Ledger) -> bytes:
    """A SQLite ledger's database as one file's bytes (``VACUUM INTO``: consistent, compact)."""
    if not ledger.is_sqlite:
        raise ValueError("a snapshot is made from a SQLite ledger (a replay's rebuild)")
    with tempfile.TemporaryDirectory(prefix="heddle-snapshot-") as folder:
        target = Path(folder) / "snapshot.db"
        with ledger.engine.connect() as connection:
            connection.exec_driver_sql(f"VACUUM INTO '{target}'")
        return target.read_bytes()


def seed_file(sequence: int, database: bytes, path: Path, consumer: str) -> None:
    """Write a snapshot's ``database`` as the SQLite ledger at ``path`` with ``consumer``
    positioned at its ``sequence`` (a replay continues after it)."""
    path.write_bytes(database)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM consumer_positions WHERE consumer != ?", (consumer,))
        connection.execute(
            "INSERT INTO consumer_positions (consumer, stream, stream_sequence, num_events, "
            "updated_at) VALUES (?, ?, ?, 0, 0) ON CONFLICT (consumer) DO UPDATE SET "
            "stream_sequence = excluded.stream_sequence",
            (consumer, "HEDDLE_EVENTS", sequence),
        )


def restore(
    sequence: int, database: bytes, ledger: Ledger, consumer: str = LEDGER_CONSUMER
) -> None:
    """Copy a snapshot's rows into ``ledger`` (SQLite or PostgreSQL, expected empty) and set
    ``consumer``'s position to its ``sequence``, in one transaction."""
    with tempfile.TemporaryDirectory(prefix="heddle-restore-") as folder:
        source_path = Path(folder) / "snapshot.db"
        source_path.write_bytes(database)
        source = open_ledger(f"sqlite:///{source_path}")
        try:
            with source.engine.connect() as reading, ledger.engine.begin() as writing:
                for table in _TABLES:
                    _copy(reading, writing, table)
                counted = reading.execute(select(func.max(_positions.c.num_events))).scalar()
                writing.execute(delete(_positions).where(_positions.c.consumer == consumer))
                writing.execute(insert(_positions).values(
                    consumer=consumer, stream="HEDDLE_EVENTS", stream_sequence=sequence,
                    num_events=int(counted or 0), updated_at=0.0,
                ))  # fmt: skip
        finally:
            source.close()


def _copy(reading: Connection, writing: Connection, table: Table) -> None:
    result = reading.execution_options(yield_per=_COPY_ROWS).execute(select(table))
    for rows in result.mappings().partitions(_COPY_ROWS):
        writing.execute(insert(table), [dict(row) for row in rows])


def position(ledger: Ledger, consumer: str = LEDGER_CONSUMER) -> int:
    """``consumer``'s committed position in ``ledger`` (0: none)."""
    query = select(_positions.c.stream_sequence).where(_positions.c.consumer == consumer)
    with ledger.engine.connect() as connection:
        stored = connection.execute(query).scalar()
    return int(stored) if stored is not None else 0
