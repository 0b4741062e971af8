"""Rows by composite key, looked up in the primary-key index: the projector's reads of a batch.

SQLite answers ``WHERE (a, b) IN ((?, ?), (?, ?), ...)`` by scanning the whole table, once per
query: the projector read every batch's existing step rows that way, a full scan of the steps
per batch, slower as the ledger grows (docs/benchmarks.md, "Projection at the live rate"). The
keys are joined from a ``VALUES`` list instead, which both SQLite and PostgreSQL answer with one
index search per key::

    WITH wanted(a, b) AS (VALUES (?, ?), (?, ?)) SELECT t.* FROM wanted JOIN t ON t.a = wanted.a
    AND t.b = wanted.b [AND extra conditions]

The statement is plain text, cached per table and number of keys (SQLAlchemy would compile a
``values()`` construct anew for every batch, at more cost than the lookups); results go through
the columns' own SQLAlchemy result processors (status members, SQLite's booleans), so they come
back as a ``select`` would return them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, Table

_Process = Callable[[Any], Any]


def rows_by_key(
    connection: Connection,
    table: Table,
    key_columns: tuple[str, ...],
    keys: Sequence[tuple[Any, ...]],
    *,
    equal: tuple[tuple[str, Any], ...] = (),
) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` whose ``key_columns`` equal one of ``keys`` (and whose columns in
    ``equal`` hold those values), as column -> value dicts. A key listed twice is returned
    once per listing."""
    if not keys:
        return
    placeholder = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    extra = tuple(name for name, _ in equal)
    sql = _statement(table, key_columns, extra, len(keys), placeholder)
    parameters = [value for key in keys for value in key] + [value for _, value in equal]
    names = [column.name for column in table.columns]
    processors = _result_processors(table, connection.dialect)
    for record in connection.exec_driver_sql(sql, tuple(parameters)):
        row = dict(zip(names, record, strict=True))
        for name, process in processors:
            row[name] = process(row[name])
        yield row


@functools.lru_cache(maxsize=256)
def _statement(
    table: Table,
    key_columns: tuple[str, ...],
    extra: tuple[str, ...],
    num_keys: int,
    placeholder: str,
) -> str:
    row = f"({', '.join([placeholder] * len(key_columns))})"
    matches = [f"{table.name}.{name} = wanted.{name}" for name in key_columns]
    matches += [f"{table.name}.{name} = {placeholder}" for name in extra]
    selected = ", ".join(f"{table.name}.{column.name}" for column in table.columns)
    return (
        f"WITH wanted ({', '.join(key_columns)}) AS (VALUES {', '.join([row] * num_keys)}) "
        f"SELECT {selected} FROM wanted JOIN {table.name} ON {' AND '.join(matches)}"
    )


@functools.cache
def _result_processors(table: Table, dialect: Dialect) -> tuple[tuple[str, _Process], ...]:
    """(column, processor) of the columns whose driver values SQLAlchemy converts on reading
    with ``dialect``."""
    processors = (
        (column.name, column.type.result_processor(dialect, None)) for column in table.columns
    )
    return tuple((name, process) for name, process in processors if process is not None)
