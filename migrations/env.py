"""Alembic environment of the Heddle ledger (run through ``heddle.ledger.migrate``).

The engine comes from ``config.attributes["engine"]`` (Heddle passes it) or from the
``sqlalchemy.url`` option / ``HEDDLE_DATABASE_URL`` when Alembic's own CLI runs this directory.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Engine, create_engine

from heddle.ledger.tables import metadata

config = context.config


def _engine() -> Engine:
    engine = config.attributes.get("engine")
    if isinstance(engine, Engine):
        return engine
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("HEDDLE_DATABASE_URL")
    if not url:
        raise RuntimeError("set sqlalchemy.url or HEDDLE_DATABASE_URL")
    return create_engine(url)


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            # SQLite alters tables by copying them; batch mode makes future migrations portable.
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
