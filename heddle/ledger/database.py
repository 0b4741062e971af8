"""Ledger connections: SQLAlchemy engines tuned per backend, schema checked on open.

SQLite (the embedded default) runs in WAL mode with ``synchronous=NORMAL``: readers never block
the projector, and a commit costs no fsync (the stream is the source of truth, so a ledger that
loses its last commits on an OS crash is rebuilt from it). Only checkpoints sync, so the WAL is
checkpointed every ``SQLITE_WAL_CHECKPOINT_PAGES`` pages instead of SQLite's 1,000. PostgreSQL
serves production.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from heddle.errors import UserError
from heddle.ledger.migrate import ensure_schema

SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_WAL_CHECKPOINT_PAGES = 10_000
"""Pages the WAL grows by between checkpoints (40 MiB of 4 KiB pages): each checkpoint syncs
twice, and at SQLite's default the projector's commits spent ~0.5 us an event more
(docs/benchmarks.md)."""


@dataclass(frozen=True, slots=True)
class Ledger:
    """An open ledger database (schema at the latest migration)."""

    url: str
    engine: Engine

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def close(self) -> None:
        self.engine.dispose()


def create_ledger_engine(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"not a database URL: {url!r}") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _tune_sqlite)
        return engine
    return create_engine(parsed, pool_pre_ping=True)


def open_ledger(url: str, *, auto_upgrade: bool = True) -> Ledger:
    """Connect and bring the schema to the latest migration.

    An empty database is always migrated; one with an older schema is migrated only with
    ``auto_upgrade`` (the embedded SQLite), otherwise ``UserError`` asks for ``heddle db
    upgrade``.
    """
    engine = create_ledger_engine(url)
    try:
        ensure_schema(engine, auto_upgrade=auto_upgrade)
    except BaseException:
        engine.dispose()
        raise
    return Ledger(url, engine)


def _tune_sqlite(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_CHECKPOINT_PAGES}")
    cursor.close()
