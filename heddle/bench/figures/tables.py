"""Markdown tables for the figures' reports: a header row, aligned numbers, one line per row."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TableCell = str | int | float | None


@dataclass(frozen=True, slots=True)
class Table:
    """A markdown table: ``headers`` and ``rows`` of cells (numbers are right-aligned)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[TableCell, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(
                    f"row {row!r} has {len(row)} cells for {len(self.headers)} headers"
                )

    def to_markdown(self) -> str:
        numeric = [all(_is_number(row[i]) for row in self.rows) for i in range(len(self.headers))]
        lines = [
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---:" if is_num else "---" for is_num in numeric) + "|",
        ]
        lines.extend(
            "| " + " | ".join(format_cell(cell) for cell in row) + " |" for row in self.rows
        )
        return "\n".join(lines) + "\n"


def table(headers: Sequence[str], rows: Sequence[Sequence[TableCell]]) -> Table:
    return Table(tuple(headers), tuple(tuple(row) for row in rows))


def format_cell(cell: TableCell) -> str:
    """Integers as-is; floats to ~3 significant digits, at most 3 decimals."""
    if cell is None:
        return "-"
    if isinstance(cell, bool | str):
        return str(cell)
    if isinstance(cell, int):
        return f"{cell:d}"
    if math.isnan(cell):
        return "nan"
    if math.isinf(cell):
        return "inf" if cell > 0 else "-inf"
    magnitude = abs(cell)
    if magnitude >= 1000:
        return f"{cell:,.0f}"
    if magnitude >= 100:
        return f"{cell:.0f}"
    if magnitude >= 10:
        return f"{cell:.1f}"
    if magnitude >= 0.01 or magnitude == 0:
        return f"{cell:.2f}"
    return f"{cell:.3f}" if magnitude >= 0.0005 else "0.000"


def _is_number(cell: TableCell) -> bool:
    return cell is None or (isinstance(cell, int | float) and not isinstance(cell, bool))
