"""The embedded SQLite ledger's connection settings."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from heddle.ledger.database import SQLITE_WAL_CHECKPOINT_PAGES, open_ledger


def test_sqlite_connections_use_wal_without_commit_syncs(tmp_path: Path) -> None:
    """Readers never block the projector, commits do not sync, and the WAL is checkpointed
    (the only syncs) every ``SQLITE_WAL_CHECKPOINT_PAGES`` pages."""
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        with ledger.engine.connect() as connection:

            def pragma(name: str) -> object:
                return connection.execute(text(f"PRAGMA {name}")).scalar()

            assert pragma("journal_mode") == "wal"
            assert pragma("synchronous") == 1  # NORMAL
            assert pragma("wal_autocheckpoint") == SQLITE_WAL_CHECKPOINT_PAGES > 1000
    finally:
        ledger.close()
