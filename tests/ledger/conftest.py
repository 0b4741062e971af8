"""Ledger fixtures: an isolated database per test (SQLite file; PostgreSQL schema dropped after)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from heddle.ledger import Ledger, open_ledger


@pytest.fixture
def ledger_url(database_url: str) -> Iterator[str]:
    """``database_url`` made private to the test: PostgreSQL gets a fresh schema, dropped after."""
    if not database_url.startswith("postgresql"):
        yield database_url
        return
    schema = f"heddle_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(database_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    opened = open_ledger(ledger_url)
    try:
        yield opened
    finally:
        opened.close()
