"""Bulk row writes: one ``INSERT ... ON CONFLICT`` per table and batch.

SQLAlchemy's per-row parameter processing costs more than SQLite's own work for the projector's
thousands of rows per second, so the statements are compiled once per table and executed on
plain tuples (``msgspec.structs.astuple`` of row structs whose fields are the table's columns,
in order). On SQLite the rows go as multi-row ``VALUES`` lists, as many rows per statement as
the variable limit allows: the driver's ``executemany`` releases and retakes the GIL for every
row, and beside a busy event loop (the projector decoding its next batch) a batch's trajectory
upserts took 5x their own time (docs/benchmarks.md, "Event bus and ledger"). A multi-row
``INSERT ... ON CONFLICT`` applies its rows in order, as ``executemany`` would. Tables with JSON
columns take the ordinary SQLAlchemy path, which serialises them.

The driver binds exact ``int``, ``float`` and ``str`` values directly and sends every other
value (``None``, ``bool``, an enum member) through its adapter registry first, at about ten
times the cost of a plain bind while holding the GIL. So the SQLite rows go with ``None`` as
NaN (SQLite stores a bound NaN as NULL, in any column), status members as their values and
booleans as integers: what is stored is what the adapters would have stored.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec
from sqlalchemy import JSON, Boolean, Connection, Dialect, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from heddle.ledger.statuses import StatusType

SQLITE_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
"""SQLite's default limit on one statement's parameters (999 before 3.32)."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    to_params: Callable[[msgspec.Struct], Any]
    statement: Insert
    is_raw: bool
    multi_row: _MultiRow | None = None


@dataclass(frozen=True, slots=True)
class _MultiRow:
    """``head VALUES (?, ...), (?, ...) tail``: the statement for any number of rows."""

    head: str
    row: str
    tail: str
    rows_per_statement: int

    def sql(self, num_rows: int) -> str:
        return f"{self.head}VALUES {', '.join([self.row] * num_rows)}{self.tail}"

    @classmethod
    def of(cls, sql: str, num_columns: int) -> _MultiRow:
        row = f"({', '.join(['?'] * num_columns)})"
        head, values, tail = sql.partition(f"VALUES {row}")
        if not values:
            raise AssertionError(f"unexpected insert statement: {sql[:200]}")
        return cls(head, row, tail, max(1, SQLITE_MAX_VARIABLES // num_columns))


class Upserts:
    """Compiled upserts of one backend: ``replace`` (last write wins) and ``keep_first``."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        self._compiled: dict[tuple[str, bool], _Compiled] = {}

    def replace(self, connection: Connection, table: Table, rows: Iterable[msgspec.Struct]) -> None:
        """Insert the rows, overwriting existing rows with the same primary key."""
        self._execute(connection, self._get(table, replace=True), rows)

    def keep_first(
        self, connection: Connection, table: Table, rows: Iterable[msgspec.Struct]
    ) -> None:
        """Insert the rows whose primary key is not there yet."""
        self._execute(connection, self._get(table, replace=False), rows)

    def _execute(
        self, connection: Connection, compiled: _Compiled, rows: Iterable[msgspec.Struct]
    ) -> None:
        params = [compiled.to_params(row) for row in rows]
        if not params:
            return
        if compiled.multi_row is not None:
            many = compiled.multi_row
            for start in range(0, len(params), many.rows_per_statement):
                chunk = params[start : start + many.rows_per_statement]
                flat = tuple(itertools.chain.from_iterable(chunk))
                connection.exec_driver_sql(many.sql(len(chunk)), flat)
        elif compiled.is_raw:
            connection.exec_driver_sql(compiled.sql, params)
        else:
            connection.execute(compiled.statement, params)

    def _get(self, table: Table, *, replace: bool) -> _Compiled:
        compiled = self._compiled.get((table.name, replace))
        if compiled is None:
            compiled = self._compiled[(table.name, replace)] = self._compile(table, replace)
        return compiled

    def _compile(self, table: Table, replace: bool) -> _Compiled:
        base = self._insert(table)
        if replace:
            keys = [column.name for column in table.primary_key]
            changes = {c.name: base.excluded[c.name] for c in table.columns if not c.primary_key}
            statement = base.on_conflict_do_update(index_elements=keys, set_=changes)
        else:
            statement = base.on_conflict_do_nothing()
        has_json = any(isinstance(column.type, JSON) for column in table.columns)
        compiled = statement.compile(dialect=self._dialect)
        columns = [column.name for column in table.columns]
        if has_json:
            return _Compiled(str(compiled), msgspec.structs.asdict, statement, is_raw=False)
        if compiled.positiontup is not None:
            if list(compiled.positiontup) != columns:
                raise AssertionError(f"{table.name}: unexpected parameter order")
            sql = str(compiled)
            if self._dialect.name != "sqlite":
                return _Compiled(sql, msgspec.structs.astuple, statement, is_raw=True)
            many = _MultiRow.of(sql, len(columns))
            return _Compiled(sql, sqlite_params(table), statement, is_raw=True, multi_row=many)
        return _Compiled(str(compiled), msgspec.structs.asdict, statement, is_raw=True)


def sqlite_params(table: Table) -> Callable[[msgspec.Struct], list[Any]]:
    """Row struct -> the parameters of ``table``'s columns, in order, as SQLite binds them
    without adaptation: ``None`` as NaN (stored as NULL), status members as their values,
    booleans as integers. Only the columns that can hold such values are looked at."""
    nullable = [i for i, column in enumerate(table.columns) if column.nullable]
    statuses = [i for i, column in enumerate(table.columns) if isinstance(column.type, StatusType)]
    booleans = [i for i, column in enumerate(table.columns) if isinstance(column.type, Boolean)]
    astuple = msgspec.structs.astuple
    nan = math.nan

    def params(row: msgspec.Struct) -> list[Any]:
        values = list(astuple(row))
        for index in statuses:
            member = values[index]
            if isinstance(member, Enum):
                values[index] = member.value
        for index in booleans:
            if values[index] is not None:
                values[index] = int(values[index])
        for index in nullable:
            if values[index] is None:
                values[index] = nan
        return values

    return params
