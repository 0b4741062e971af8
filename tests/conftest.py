"""Shared fixtures: a real nats-server on a free port, SQL database URLs for the ledger tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from heddle.bus.server import EmbeddedNatsServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """A fresh JetStream server for one test (never port 4222)."""
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: EmbeddedNatsServer) -> str:
    return nats_server.url


def _database_params() -> list[str]:
    params = ["sqlite"]
    if os.environ.get("HEDDLE_TEST_DATABASE_URL"):
        params.append("postgresql")
    return params


@pytest.fixture(params=_database_params())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL: a temporary SQLite file, and PostgreSQL when HEDDLE_TEST_DATABASE_URL is set.

    Each PostgreSQL test gets its own schema-free database state: tests must use unique rollout
    ids or call the ledger's reset helper.
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return os.environ["HEDDLE_TEST_DATABASE_URL"]
