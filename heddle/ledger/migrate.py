"""Alembic migrations of the ledger schema.

The scripts live in ``migrations/`` at the repository root; ``heddle/ledger/alembic`` is a
symbolic link to it, so an editable install finds them through the package, and a wheel (whose
builder follows the link and copies the files as package data) carries them too.
"""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

from heddle.errors import UserError

SCRIPTS_DIR = Path(__file__).resolve().parent / "alembic"
_MIGRATION_LOCK = threading.Lock()


def alembic_config(engine: Engine | None = None) -> Config:
    """An Alembic config on our scripts; with ``engine``, migrations run on its connection."""
    if not (SCRIPTS_DIR / "env.py").is_file():
        raise UserError(f"ledger migrations not found at {SCRIPTS_DIR} (broken installation?)")
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS_DIR))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migration scripts"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)


def is_empty(engine: Engine) -> bool:
    return not inspect(engine).get_table_names()


def ensure_schema(engine: Engine, *, auto_upgrade: bool) -> None:
    """Migrate an empty database (always) or an outdated one (with ``auto_upgrade``).

    Alembic keeps per-run state in module globals, so migrations of one process run one at a
    time; other processes migrating the same database at once are tolerated (see below)."""
    with _MIGRATION_LOCK:
        _ensure_schema(engine, auto_upgrade)


def _ensure_schema(engine: Engine, auto_upgrade: bool) -> None:
    current = current_revision(engine)
    if current == head_revision():
        return
    if current is None and not is_empty(engine) and not auto_upgrade:
        raise UserError(
            f"database {engine.url.render_as_string(hide_password=True)} has tables but no "
            "Heddle schema version: point Heddle at an empty database"
        )
    if current is not None and not auto_upgrade:
        raise UserError(
            f"ledger schema is at revision {current}, Heddle needs {head_revision()}: "
            "run `heddle db upgrade`"
        )
    try:
        upgrade(engine)
    except Exception:
        # Another process may have migrated the same database at the same moment.
        if current_revision(engine) != head_revision():
            raise
