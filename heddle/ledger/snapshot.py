"""Reading a live ledger without writing it: one consistent snapshot, as of one stream position.

The projector commits its rows and its position in one transaction, so a reader that sees both
in one snapshot sees the ledger exactly as of that position, however far the projector moves on
meanwhile. ``heddle replay --verify`` compares a scratch rebuild with such a snapshot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import Connection, Table, inspect, select

from heddle.errors import UserError
from heddle.ledger.database import Ledger, create_ledger_engine
from heddle.ledger.tables import ConsumerPosition

_positions: Table = ConsumerPosition.__table__  # type: ignore[assignment]


def open_read_only(url: str) -> Ledger:
    """The ledger at ``url`` as it is: no schema created or migrated (``UserError`` when it holds
    no ledger). The caller only reads through it."""
    engine = create_ledger_engine(url)
    if not inspect(engine).has_table(_positions.name):
        engine.dispose()
        raise UserError(f"no ledger at {url} (nothing projected yet?)")
    return Ledger(url, engine)


@contextlib.contextmanager
def snapshot(ledger: Ledger) -> Iterator[Connection]:
    """A connection inside one read transaction that sees a single commit of the ledger (SQLite:
    an explicit deferred BEGIN, the snapshot fixed by the first read; PostgreSQL: REPEATABLE
    READ). Rolled back on exit."""
    with ledger.engine.connect() as connection:
        if ledger.is_sqlite:
            # pysqlite starts no transaction before a SELECT: every read would see a new commit.
            connection.exec_driver_sql("BEGIN")
        else:
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        try:
            yield connection
        finally:
            connection.rollback()


def position_in(connection: Connection, consumer: str) -> int:
    """The consumer's committed stream position as the connection sees it (0: none)."""
    query = select(_positions.c.stream_sequence).where(_positions.c.consumer == consumer)
    stored = connection.execute(query).scalar()
    return int(stored) if stored is not None else 0
