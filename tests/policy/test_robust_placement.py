"""Hedged and interleaved splits (heddle.policy.placement.robust) against direct constructions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.policy.placement.blocks import Partition, groups_from_sizes, longest_first
from heddle.policy.placement.robust import hedged, interleaved, is_memory_bound

lengths_st = st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=60)


@st.composite
def contiguous_partitions(draw: st.DrawFn) -> tuple[list[float], Partition]:
    """Lengths and a contiguous longest-first partition of them into 1-6 blocks."""
    lengths = draw(lengths_st)
    num_workers = draw(st.integers(1, 6))
    cuts = sorted(draw(st.lists(st.integers(0, len(lengths)), min_size=num_workers - 1,
                                max_size=num_workers - 1)))  # fmt: skip
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, len(lengths)], strict=True)]
    return lengths, Partition(groups_from_sizes(longest_first(lengths), sizes), 1.0)


def block_sizes(partition: Partition, lengths: list[float]) -> list[int]:
    """Sizes of the blocks in longest-first order (the order ``hedged`` keeps)."""
    order = longest_first(lengths)
    position = {index: rank for rank, index in enumerate(order)}
    blocks = sorted((g for g in partition.groups if g), key=lambda g: min(position[i] for i in g))
    return [len(block) for block in blocks]


@given(contiguous_partitions(), st.floats(0, 1))
def test_hedged_stays_contiguous_covers_all_and_lies_between_exact_and_even(
    case: tuple[list[float], Partition], hedge: float
) -> None:
    lengths, exact = case
    result = hedged(exact, lengths, hedge)
    order = longest_first(lengths)
    assert sorted(i for g in result.groups for i in g) == list(range(len(lengths)))
    for group in result.groups:  # each group is one contiguous stretch of the ranking
        ranks = sorted(order.index(i) for i in group)
        assert ranks == list(range(ranks[0], ranks[0] + len(ranks))) if ranks else True
    even = len(lengths) / exact.num_workers
    for worker, group in enumerate(exact.groups):
        target = (1 - hedge) * len(group) + hedge * even
        assert abs(len(result.groups[worker]) - target) <= 2  # rounding of cumulative sums


@given(contiguous_partitions())
def test_no_hedge_is_the_exact_partition_and_full_hedge_is_even(
    case: tuple[list[float], Partition],
) -> None:
    lengths, exact = case
    assert hedged(exact, lengths, 0.0) is exact
    sizes = [len(g) for g in hedged(exact, lengths, 1.0).groups]
    assert max(sizes) - min(sizes) <= 1


def test_hedge_outside_the_unit_interval_is_refused() -> None:
    exact = Partition([[0]], 1.0)
    with pytest.raises(ValueError, match="hedge"):
        hedged(exact, [1.0], 1.5)


@given(lengths_st, st.integers(1, 6))
def test_interleaved_with_equal_capacities_deals_round_robin_by_rank(
    lengths: list[float], num_workers: int
) -> None:
    result = interleaved(lengths, [1.0] * num_workers)
    expected: list[list[int]] = [[] for _ in range(num_workers)]
    for rank, index in enumerate(longest_first(lengths)):
        expected[rank % num_workers].append(index)
    assert result.groups == expected


@given(lengths_st, st.lists(st.integers(1, 8), min_size=1, max_size=5))
def test_interleaved_counts_follow_capacities(lengths: list[float], capacities: list[int]) -> None:
    result = interleaved(lengths, [float(c) for c in capacities])
    assert sorted(i for g in result.groups for i in g) == list(range(len(lengths)))
    per_capacity = [len(g) / c for g, c in zip(result.groups, capacities, strict=True)]
    # Greedy by fewest per unit of capacity: no worker is more than one trajectory ahead.
    assert max(per_capacity) - min(per_capacity) <= 1.0 + 1e-9
    assert result.makespan == pytest.approx(max(per_capacity))


def test_interleaved_needs_workers_with_room() -> None:
    with pytest.raises(ValueError, match="empty"):
        interleaved([1.0], [])
    with pytest.raises(ValueError, match="> 0"):
        interleaved([1.0], [0.0])


@given(
    st.lists(st.tuples(st.integers(0, 4000), st.floats(0, 30000)), min_size=1, max_size=30),
    st.floats(0, 2),
    st.lists(st.integers(1, 200_000), min_size=1, max_size=4),
)
def test_memory_bound_compares_mean_footprints_with_capacity(
    trajectories: list[tuple[int, float]], ratio: float, capacities: list[int]
) -> None:
    prompts = [p for p, _ in trajectories]
    outputs = [o for _, o in trajectories]
    demand = sum(p + (1 + ratio) * o / 2 for p, o in trajectories)
    assert is_memory_bound(prompts, outputs, ratio, capacities) == (demand > sum(capacities))
