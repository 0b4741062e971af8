"""Bulk upserts against a row-by-row reference: SQLite's multi-row statements, split wherever the
variable limit splits a batch, keep ``executemany``'s order (the last write of a key wins under
``replace``, the first under ``keep_first``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

import heddle.ledger.upserts as upserts
from heddle.ledger.database import open_ledger
from heddle.ledger.rows import TrajectoryRow
from heddle.ledger.tables import Trajectory

NUM_COLUMNS = len(Trajectory.__table__.columns)

writes = st.lists(
    st.tuples(st.booleans(), st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 99)))),
    max_size=6,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=writes, rows_per_statement=st.integers(1, 4))
def test_multi_row_statements_write_what_row_by_row_writes_would(
    batches: list[tuple[bool, list[tuple[str, int]]]],
    rows_per_statement: int,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upserts, "SQLITE_MAX_VARIABLES", rows_per_statement * NUM_COLUMNS)
    folder: Path = tmp_path_factory.mktemp("upserts")
    ledger = open_ledger(f"sqlite:///{folder / 'ledger.db'}")
    table = Trajectory.__table__
    bulk = upserts.Upserts(ledger.engine.dialect)
    expected: dict[str, int] = {}
    try:
        for replace, rows in batches:
            structs = [TrajectoryRow(rollout_id="r", traj_id=key, num_steps=n) for key, n in rows]
            with ledger.engine.begin() as connection:
                if replace:
                    bulk.replace(connection, table, structs)
                else:
                    bulk.keep_first(connection, table, structs)
            for key, n in rows:
                if replace or key not in expected:
                    expected[key] = n
        with ledger.engine.connect() as connection:
            stored = dict(connection.execute(select(table.c.traj_id, table.c.num_steps)).all())
    finally:
        ledger.close()
    assert stored == expected


def test_a_batch_over_the_variable_limit_is_split() -> None:
    many = upserts._MultiRow.of("INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING", 2)
    assert many.rows_per_statement == upserts.SQLITE_MAX_VARIABLES // 2
    assert (
        many.sql(3) == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) ON CONFLICT DO NOTHING"
    )
