"""Row packing against brute force: valid rows, and no more rows than the deepest overlap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.timeline import pack_rows

_INTERVALS = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 20)).map(lambda p: (float(p[0]), p[0] + p[1])),
    max_size=40,
)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most half-open intervals covering one instant (checked at every start)."""
    return max(
        (sum(1 for s, e in intervals if s <= t < e) for t, _ in intervals),
        default=0,
    )


@settings(max_examples=300)
@given(intervals=_INTERVALS)
def test_rows_never_overlap_and_are_as_few_as_possible(
    intervals: list[tuple[float, float]],
) -> None:
    rows = pack_rows(intervals)
    assert len(rows) == len(intervals)
    for i, (s1, e1) in enumerate(intervals):
        for j, (s2, e2) in enumerate(intervals[:i]):
            if rows[i] == rows[j]:
                assert e1 <= s2 or e2 <= s1, (intervals[i], intervals[j])
    assert (max(rows) + 1 if rows else 0) == max_overlap(intervals)


def test_touching_intervals_share_a_row_and_bad_ones_are_refused() -> None:
    assert pack_rows([(0.0, 1.0), (1.0, 2.0), (0.5, 1.5)]) == [0, 0, 1]
    with pytest.raises(ValueError, match="ends before it starts"):
        pack_rows([(2.0, 1.0)])
