"""Trajectory-aware placement (docs/paper.md, the paper's s.5): split trajectories over workers to
minimise

    makespan = max over groups g of  T * F(|g|) * max_{t in g} L(t)

with ``F`` the interference factor (non-decreasing in group size; ``math.inf`` beyond a KV cap).

By the paper's lemma an optimal partition exists whose groups are contiguous runs of the lengths
sorted longest first, so every solver here splits that order into blocks:

* ``partition``: exact, greedy decision + Nicol's search (``heddle.policy.placement.bottleneck``),
  about a millisecond for ``n = 6400, m = 16`` (docs/calibration.md s.3).
* ``partition_reference``: the paper's ``O(n^2 m)`` DP, vectorised over the split point with
  numpy (``heddle.policy.placement.reference``); kept as the reference the fast solver must match.
* ``partition_heterogeneous``: workers with their own ``T`` and ``F`` (different TP degrees;
  ``heddle.policy.placement.hetero``).

Conventions shared by all: unit time ``T = 1`` in the homogeneous forms; a group whose size has
``F = inf`` costs ``inf`` (even if its trajectories have length 0); empty groups cost 0; equal
lengths keep their input order, so results are deterministic. When no partition has a finite
makespan (more trajectories than the KV caps admit), the result has ``makespan = inf`` and
near-equal contiguous groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from heddle.policy.placement.blocks import (
    Interference,
    Partition,
    check_lengths,
    check_num_workers,
    cost_table,
    groups_from_sizes,
    longest_first,
)
from heddle.policy.placement.bottleneck import even_sizes, solve_fixed_order
from heddle.policy.placement.hetero import WorkerModel, partition_heterogeneous
from heddle.policy.placement.reference import presorted_dp

__all__ = [
    "Interference",
    "Partition",
    "WorkerModel",
    "partition",
    "partition_heterogeneous",
    "partition_reference",
]


def partition(lengths: Sequence[float], num_workers: int, interference: Interference) -> Partition:
    """The exact min-makespan partition of ``lengths`` over ``num_workers`` identical workers.

    Raises ``ValueError`` for empty or invalid lengths (negative, NaN, inf), fewer than one
    worker, or an interference function that is negative, NaN or decreasing on ``1..n``.
    """
    values = check_lengths(lengths)
    check_num_workers(num_workers)
    order = longest_first(values)
    sorted_lengths = [values[index] for index in order]
    table = cost_table(interference, len(values))
    split = solve_fixed_order(sorted_lengths, [table] * num_workers)
    return Partition(groups_from_sizes(order, split.sizes), split.makespan)


def partition_reference(
    lengths: Sequence[float], num_workers: int, interference: Interference
) -> Partition:
    """The paper's presorted DP (``O(n^2 m)``): same contract and makespan as ``partition``."""
    values = check_lengths(lengths)
    check_num_workers(num_workers)
    order = longest_first(values)
    sorted_lengths = [values[index] for index in order]
    table = cost_table(interference, len(values))
    sizes, makespan = presorted_dp(sorted_lengths, table, num_workers)
    if makespan == math.inf:
        sizes = even_sizes(len(values), num_workers)
    return Partition(groups_from_sizes(order, sizes), makespan)
