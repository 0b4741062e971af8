"""Rows of a Gantt lane: intervals packed so that no two in one row overlap.

Interval partitioning, greedy by start time: each interval takes the row that became free
earliest (a heap of row end times), or opens a new row. This uses exactly as many rows as the
most intervals that overlap at one instant, the fewest possible (Kleinberg & Tardos, s.4.1).
Intervals are half-open: one ending at t and another starting at t share a row.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def pack_rows(intervals: Sequence[tuple[float, float]]) -> list[int]:
    """The row of each ``(start, end)`` interval (``start <= end``), in input order."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][1], i))
    rows = [0] * len(intervals)
    free: list[tuple[float, int]] = []  # (end of the row's last interval, row)
    num_rows = 0
    for index in order:
        start, end = intervals[index]
        if end < start:
            raise ValueError(f"interval {index} ends before it starts: {start} > {end}")
        if free and free[0][0] <= start:
            _, row = heapq.heappop(free)
        else:
            row, num_rows = num_rows, num_rows + 1
        rows[index] = row
        heapq.heappush(free, (end, row))
    return rows
