"""Bulk row writes: one ``INSERT ... ON CONFLICT`` per table and batch, run as ``executemany``.

SQLAlchemy's per-row parameter processing costs more than SQLite's own work for the projector's
thousands of rows per second, so the statements are compiled once per table and executed with
the driver's ``executemany`` on plain tuples (``msgspec.structs.astuple`` of row structs whose
fields are the table's columns, in order). Tables with JSON columns take the ordinary
SQLAlchemy path, which serialises them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import JSON, Connection, Dialect, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    to_params: Callable[[msgspec.Struct], Any]
    statement: Insert
    is_raw: bool


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
        if compiled.is_raw:
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
            return _Compiled(str(compiled), msgspec.structs.astuple, statement, is_raw=True)
        return _Compiled(str(compiled), msgspec.structs.asdict, statement, is_raw=True)
