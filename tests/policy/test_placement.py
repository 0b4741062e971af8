"""The homogeneous placement solver against brute force and the paper's DP."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.placement.presorted import Partition, partition, partition_reference

from .strategies import (
    StepInterference,
    brute_force_makespan,
    interferences,
    lengths_lists,
    makespan_of,
)


def linear(slope: float) -> StepInterference:
    return StepInterference(1.0, (slope,), None)


def assert_well_formed(result: Partition, num_items: int, num_workers: int) -> None:
    assert len(result.groups) == num_workers
    placed = sorted(index for group in result.groups for index in group)
    assert placed == list(range(num_items))


def assert_contiguous_longest_first(result: Partition, lengths: list[float]) -> None:
    """Groups, read in worker order, walk the lengths from longest to shortest."""
    walked = [lengths[index] for group in result.groups for index in group]
    assert walked == sorted(walked, reverse=True)


@settings(max_examples=150)
@given(
    lengths=lengths_lists(1, 8),
    num_workers=st.integers(min_value=1, max_value=4),
    interference=interferences(max_cap=4),
)
def test_partition_equals_brute_force(
    lengths: list[float], num_workers: int, interference: StepInterference
) -> None:
    result = partition(lengths, num_workers, interference)
    assert_well_formed(result, len(lengths), num_workers)
    assert result.makespan == brute_force_makespan(lengths, num_workers, interference)
    assert result.makespan == makespan_of(lengths, result.groups, interference)


@settings(max_examples=60)
@given(
    lengths=lengths_lists(1, 300),
    num_workers=st.integers(min_value=1, max_value=12),
    interference=interferences(max_cap=60),
)
def test_partition_equals_reference_dp(
    lengths: list[float], num_workers: int, interference: StepInterference
) -> None:
    fast = partition(lengths, num_workers, interference)
    reference = partition_reference(lengths, num_workers, interference)
    assert fast.makespan == reference.makespan
    assert_well_formed(reference, len(lengths), num_workers)
    if fast.makespan < math.inf:
        assert_contiguous_longest_first(fast, lengths)
        assert makespan_of(lengths, reference.groups, interference) == reference.makespan


def test_one_giant_trajectory_gets_a_worker_alone() -> None:
    lengths = [100.0] + [10.0] * 30
    result = partition(lengths, 4, linear(0.05))
    assert [0] in result.groups
    assert result.makespan == 100.0  # F(1) = 1; the three others hold 10 each


def test_kv_cap_forces_spreading() -> None:
    capped = StepInterference(1.0, (0.0,), cap=2)
    result = partition([1.0] * 6, 3, capped)
    assert sorted(len(group) for group in result.groups) == [2, 2, 2]
    assert result.makespan == 1.0


def test_caps_too_small_give_infinite_makespan_and_all_items_placed() -> None:
    capped = StepInterference(1.0, (0.0,), cap=2)
    result = partition([1.0] * 7, 3, capped)
    assert result.makespan == math.inf
    assert_well_formed(result, 7, 3)


def test_more_workers_than_trajectories_leaves_workers_empty() -> None:
    result = partition([3.0, 1.0], 5, linear(0.1))
    assert_well_formed(result, 2, 5)
    assert sum(1 for group in result.groups if not group) == 3
    assert result.makespan == 3.0


def test_ties_are_deterministic_in_input_order() -> None:
    lengths = [5.0, 5.0, 5.0, 5.0]
    first = partition(lengths, 2, linear(0.1))
    assert first.groups == [[0, 1], [2, 3]]
    assert first == partition(lengths, 2, linear(0.1))


def test_large_instance_matches_reference() -> None:
    rng = random.Random(7)
    lengths = [rng.paretovariate(1.3) * 500 for _ in range(1500)]
    interference = StepInterference(1.0, (0.0122,), cap=400)
    fast = partition(lengths, 16, interference)
    assert fast.makespan == partition_reference(lengths, 16, interference).makespan


@pytest.mark.parametrize(
    ("lengths", "num_workers", "interference", "message"),
    [
        ([], 2, linear(0.1), "empty"),
        ([1.0, -1.0], 2, linear(0.1), r"lengths\[1\]"),
        ([1.0, math.nan], 2, linear(0.1), r"lengths\[1\]"),
        ([math.inf], 2, linear(0.1), r"lengths\[0\]"),
        ([1.0], 0, linear(0.1), "num_workers"),
        ([1.0], 1.5, linear(0.1), "num_workers"),
        ([1.0, 2.0, 3.0], 2, lambda size: 3.0 - size, "non-decreasing"),
        ([1.0, 2.0], 2, lambda size: math.nan, "NaN"),
        ([1.0, 2.0], 2, lambda size: -1.0, ">= 0"),
    ],
)
def test_bad_input_raises_value_error(
    lengths: list[float], num_workers: int, interference: StepInterference, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        partition(lengths, num_workers, interference)
    with pytest.raises(ValueError, match=message):
        partition_reference(lengths, num_workers, interference)
