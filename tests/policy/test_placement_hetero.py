"""Heterogeneous placement against brute force over every assignment."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.placement.presorted import WorkerModel, partition, partition_heterogeneous

from .strategies import StepInterference, brute_force_heterogeneous, group_cost, interferences

WORKER_TYPES = st.lists(
    st.tuples(st.sampled_from([0.25, 0.5, 1.0, 1.6]), interferences(max_cap=4)),
    min_size=1,
    max_size=3,
)


def makespan_of(lengths: list[float], workers: list[WorkerModel], groups: list[list[int]]) -> float:
    return max(
        (
            group_cost(w.per_token_s, w.interference(len(g)), max(lengths[i] for i in g))
            for w, g in zip(workers, groups, strict=True)
            if g
        ),
        default=0.0,
    )


@settings(max_examples=120)
@given(
    lengths=st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0]), min_size=1, max_size=6),
    types=WORKER_TYPES,
    data=st.data(),
)
def test_heterogeneous_equals_brute_force(
    lengths: list[float], types: list[tuple[float, StepInterference]], data: st.DataObject
) -> None:
    picks = data.draw(st.lists(st.integers(0, len(types) - 1), min_size=1, max_size=4))
    workers = [WorkerModel(types[p][0], types[p][1]) for p in picks]
    result = partition_heterogeneous(lengths, workers)
    expected = brute_force_heterogeneous(
        lengths, [(w.per_token_s, w.interference) for w in workers]
    )
    assert result.makespan == expected
    assert len(result.groups) == len(workers)
    assert sorted(i for g in result.groups for i in g) == list(range(len(lengths)))
    if expected < math.inf:
        assert makespan_of(lengths, workers, result.groups) == expected


def test_identical_workers_match_homogeneous_solver() -> None:
    rng = random.Random(3)
    lengths = [rng.lognormvariate(6, 1) for _ in range(400)]
    interference = StepInterference(1.0, (0.0122,), cap=60)
    workers = [WorkerModel(1.0, interference)] * 8
    assert (
        partition_heterogeneous(lengths, workers).makespan
        == partition(lengths, 8, interference).makespan
    )


def test_slow_worker_may_take_the_single_longest() -> None:
    """docs/calibration.md s.3: fastest-first is not always optimal."""
    fast = WorkerModel(1.0, StepInterference(1.0, (1.0,), None), "fast")
    slow = WorkerModel(1.2, StepInterference(1.0, (1.0,), None), "slow")
    lengths = [10.0, 9.0, 9.0, 9.0, 9.0]
    # Fastest first: at best fast {10, 9, 9} = 30. Slow first: slow {10, 9} = 24, fast 3 x 9 = 27.
    result = partition_heterogeneous(lengths, [fast, slow])
    assert result.groups[1] == [0, 1]
    assert result.makespan == 27.0


def test_groups_follow_input_worker_order() -> None:
    fast = WorkerModel(0.5, StepInterference(1.0, (0.1,), None))
    slow = WorkerModel(1.0, StepInterference(1.0, (0.1,), None))
    lengths = [100.0, 1.0, 1.0, 1.0]
    result = partition_heterogeneous(lengths, [slow, fast, slow])
    assert 0 in result.groups[1]


def test_heuristic_without_certificate_is_feasible_and_not_below_exact() -> None:
    rng = random.Random(11)
    lengths = [rng.paretovariate(1.2) * 100 for _ in range(300)]
    tp1 = WorkerModel(1.0, StepInterference(1.0, (0.012,), cap=80))
    tp2 = WorkerModel(0.62, StepInterference(1.0, (0.009,), cap=200))
    workers = [tp1] * 4 + [tp2] * 2
    exact = partition_heterogeneous(lengths, workers)
    quick = partition_heterogeneous(lengths, workers, exact=False)
    assert quick.makespan >= exact.makespan
    assert makespan_of(lengths, workers, quick.groups) == quick.makespan


def test_bad_input() -> None:
    worker = WorkerModel(1.0, StepInterference(1.0, (0.1,), None))
    with pytest.raises(ValueError, match="workers is empty"):
        partition_heterogeneous([1.0], [])
    with pytest.raises(ValueError, match="per-token"):
        partition_heterogeneous([1.0], [WorkerModel(0.0, worker.interference)])
    with pytest.raises(ValueError, match="lengths"):
        partition_heterogeneous([-1.0], [worker])
