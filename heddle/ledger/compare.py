"""Table-by-table comparison of two ledgers (the live one and a replay), row by primary key.

Both sides are read in primary-key order and merged, so memory stays flat however large the
tables. Keys compare bytewise on both backends (PostgreSQL sorts with ``COLLATE "C"``). A side
may be an open connection instead of a ledger: a live ledger read inside one snapshot
transaction (``heddle.ledger.snapshot``) is compared as of one stream position.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Connection, Table, select

from heddle.ledger.database import Ledger
from heddle.ledger.tables import PROJECTED_TABLES

_UNFILTERED_BY_ROLLOUT = {"workers", "dead_letters"}
"""Tables a one-rollout replay does not rebuild (worker events and dead letters are global)."""


@dataclass(slots=True)
class Comparison:
    num_rows: dict[str, int] = field(default_factory=dict)
    """Rows compared per table (union of both sides)."""
    num_mismatches: int = 0
    mismatches: list[str] = field(default_factory=list)
    """Readable differences, the first ``max_reported`` of them."""

    @property
    def is_consistent(self) -> bool:
        return self.num_mismatches == 0


LedgerSource = Ledger | Connection
"""A ledger, or a connection to one (read in its open transaction)."""


def compare_ledgers(
    live: LedgerSource,
    replayed: LedgerSource,
    *,
    rollout_id: str | None = None,
    tables: Sequence[Table] = PROJECTED_TABLES,  # type: ignore[assignment]
    max_reported: int = 50,
) -> Comparison:
    """Compare the projected tables of ``live`` with ``replayed`` (only ``rollout_id``'s rows
    when given)."""
    comparison = Comparison()
    for table in tables:
        if rollout_id is not None and table.name in _UNFILTERED_BY_ROLLOUT:
            continue
        _compare_table(live, replayed, table, rollout_id, comparison, max_reported)
    return comparison


def _compare_table(
    live: LedgerSource,
    replayed: LedgerSource,
    table: Table,
    rollout_id: str | None,
    comparison: Comparison,
    max_reported: int,
) -> None:
    key_names = [column.name for column in table.primary_key]
    value_names = [column.name for column in table.columns if not column.primary_key]
    live_rows = _ordered_rows(live, table, rollout_id)
    replayed_rows = _ordered_rows(replayed, table, rollout_id)
    num_rows = 0

    def report(message: str) -> None:
        comparison.num_mismatches += 1
        if len(comparison.mismatches) < max_reported:
            comparison.mismatches.append(f"{table.name} {message}")

    for live_row, replayed_row in _merge(live_rows, replayed_rows, key_names):
        num_rows += 1
        if live_row is None:
            report(f"{_key(replayed_row, key_names)}: missing from the live ledger")
        elif replayed_row is None:
            report(f"{_key(live_row, key_names)}: in the live ledger only")
        else:
            for name in value_names:
                if not _same(live_row[name], replayed_row[name]):
                    report(
                        f"{_key(live_row, key_names)}: {name} live={live_row[name]!r} "
                        f"replay={replayed_row[name]!r}"
                    )
    comparison.num_rows[table.name] = num_rows


def _ordered_rows(source: LedgerSource, table: Table, rollout_id: str | None) -> Iterator[Any]:
    is_postgres = source.engine.dialect.name == "postgresql"
    order: list[Any] = [
        column.collate("C") if is_postgres and _is_text(column) else column
        for column in table.primary_key
    ]
    query = select(table).order_by(*order)
    if rollout_id is not None and "rollout_id" in table.c:
        query = query.where(table.c.rollout_id == rollout_id)
    if isinstance(source, Connection):
        yield from source.execution_options(yield_per=2000).execute(query).mappings()
        return
    with source.engine.connect() as connection:
        result = connection.execution_options(yield_per=2000).execute(query)
        yield from result.mappings()


def _merge(
    left: Iterator[Any], right: Iterator[Any], key_names: list[str]
) -> Iterator[tuple[Any | None, Any | None]]:
    """Pairs of rows with equal keys (both sides in key order); None on the side lacking one."""
    sentinel = None
    a, b = next(left, sentinel), next(right, sentinel)
    while a is not None or b is not None:
        key_a = tuple(a[name] for name in key_names) if a is not None else None
        key_b = tuple(b[name] for name in key_names) if b is not None else None
        if key_b is None or (key_a is not None and key_a < key_b):
            yield a, None
            a = next(left, sentinel)
        elif key_a is None or key_b < key_a:
            yield None, b
            b = next(right, sentinel)
        else:
            yield a, b
            a, b = next(left, sentinel), next(right, sentinel)


def _key(row: Any, key_names: list[str]) -> str:
    return "(" + ", ".join(str(row[name]) for name in key_names) + ")"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def _is_text(column: Column[Any]) -> bool:
    return column.type.python_type is str
