"""Hypothesis strategies and brute-force references shared by the policy tests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st


@dataclass(frozen=True)
class StepInterference:
    """A random non-decreasing F: ``base + sum of the first b-1 increments``, inf beyond ``cap``."""

    base: float
    increments: tuple[float, ...]
    cap: int | None

    def __call__(self, size: int) -> float:
        if self.cap is not None and size > self.cap:
            return math.inf
        steps = self.increments[: size - 1]
        last = self.increments[-1] if self.increments else 0.0
        return self.base + sum(steps) + last * max(0, size - 1 - len(self.increments))


def interferences(max_cap: int = 8) -> st.SearchStrategy[StepInterference]:
    return st.builds(
        StepInterference,
        base=st.sampled_from([0.5, 1.0, 1.0, 2.0]),
        increments=st.lists(
            st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.25, 1.0, 3.0]), min_size=0, max_size=10
        ).map(tuple),
        cap=st.one_of(st.none(), st.integers(min_value=1, max_value=max_cap)),
    )


def lengths_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[float]]:
    """Lengths with many ties and zeros (where tie-breaking and 0 * F bugs hide)."""
    value = st.one_of(
        st.integers(min_value=0, max_value=12).map(float),
        st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False),
    )
    return st.lists(value, min_size=min_size, max_size=max_size)


def set_partitions(num_items: int, max_blocks: int) -> Iterator[list[int]]:
    """Every assignment of items to at most ``max_blocks`` unlabeled blocks (restricted growth)."""
    labels = [0] * num_items

    def extend(position: int, num_used: int) -> Iterator[list[int]]:
        if position == num_items:
            yield labels
            return
        for label in range(min(num_used + 1, max_blocks)):
            labels[position] = label
            yield from extend(position + 1, max(num_used, label + 1))

    yield from extend(0, 0)


def group_cost(per_token_s: float, factor: float, longest: float) -> float:
    """The block price convention of heddle.policy.placement.blocks: inf F is inf whatever the
    length."""
    if factor == math.inf:
        return math.inf
    return (per_token_s * factor) * longest if per_token_s != 1.0 else factor * longest


def makespan_of(
    lengths: Sequence[float], groups: Sequence[Sequence[int]], interference: Callable[[int], float]
) -> float:
    return max(
        (group_cost(1.0, interference(len(g)), max(lengths[i] for i in g)) for g in groups if g),
        default=0.0,
    )


def brute_force_makespan(
    lengths: Sequence[float], num_workers: int, interference: Callable[[int], float]
) -> float:
    """The optimum over all assignments to identical workers (labels are interchangeable)."""
    num_items = len(lengths)
    best = math.inf
    for labels in set_partitions(num_items, num_workers):
        groups: list[list[int]] = [[] for _ in range(num_workers)]
        for item, label in enumerate(labels):
            groups[label].append(item)
        best = min(best, makespan_of(lengths, groups, interference))
    return best


def brute_force_heterogeneous(
    lengths: Sequence[float], workers: Sequence[tuple[float, Callable[[int], float]]]
) -> float:
    """The optimum over every labelled assignment of items to workers (``m^n`` of them)."""
    best = math.inf
    num_workers = len(workers)
    for labels in itertools.product(range(num_workers), repeat=len(lengths)):
        groups: list[list[int]] = [[] for _ in range(num_workers)]
        for item, label in enumerate(labels):
            groups[label].append(item)
        cost = 0.0
        for (per_token_s, interference), group in zip(workers, groups, strict=True):
            if group:
                longest = max(lengths[i] for i in group)
                cost = max(cost, group_cost(per_token_s, interference(len(group)), longest))
        best = min(best, cost)
    return best
