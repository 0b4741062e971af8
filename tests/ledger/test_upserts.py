"""Bulk upserts against a row-by-row reference: SQLite's multi-row statements, split wherever the
variable limit splits a batch, keep ``executemany``'s order (the last write of a key wins under
``replace``, the first under ``keep_first``)."""

from __future__ import annotations

import enum
import string
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import JSON, Table, insert, select

import heddle.ledger.upserts as upserts
from heddle.ledger.database import open_ledger
from heddle.ledger.rows import TrajectoryRow
from heddle.ledger.tables import PROJECTED_TABLES, Trajectory

from .test_ledger_contract import ROW_TYPES

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


def _values(annotation: Any) -> st.SearchStrategy[Any]:
    """Values a row field of ``annotation`` may hold."""
    arguments = typing.get_args(annotation)
    if type(None) in arguments:
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return st.none() | _values(inner)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    strategies: dict[Any, st.SearchStrategy[Any]] = {
        bool: st.booleans(),
        int: st.integers(-(2**31), 2**31 - 1),
        float: st.floats(-1e9, 1e9, allow_nan=False),
        str: st.text(string.ascii_letters + " -", max_size=6),
    }
    return strategies[annotation]


BOUND_TABLES = [
    table
    for table in PROJECTED_TABLES
    if not any(isinstance(column.type, JSON) for column in table.columns)
]


@st.composite
def _rows(draw: st.DrawFn, table: Table) -> msgspec.Struct:
    row_type = ROW_TYPES[table.name]
    hints = typing.get_type_hints(row_type)
    return row_type(**{name: draw(_values(hints[name])) for name in row_type.__struct_fields__})


@pytest.mark.parametrize("table", BOUND_TABLES, ids=lambda table: table.name)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_bulk_rows_store_what_sqlalchemy_stores(
    table: Table, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """None, booleans and status members go to SQLite as NaN, integers and values
    (``sqlite_params``): what is read back equals the same row inserted by SQLAlchemy."""
    row = data.draw(_rows(table))
    folder: Path = tmp_path_factory.mktemp("bound")
    stored = []
    for name, write in (
        ("bulk", lambda c: upserts.Upserts(c.dialect).replace(c, table, [row])),
        ("reference", lambda c: c.execute(insert(table), [msgspec.structs.asdict(row)])),
    ):
        ledger = open_ledger(f"sqlite:///{folder / name}.db")
        try:
            with ledger.engine.begin() as connection:
                write(connection)
            with ledger.engine.connect() as connection:
                stored.append(connection.execute(select(table)).all())
        finally:
            ledger.close()
    assert stored[0] == stored[1]
