"""Exact feasibility of a makespan budget over *every* order of a mix of worker types.

With heterogeneous workers the contiguity lemma still holds (sort the optimal groups by their
longest member and hand each worker, in that order, the same number of trajectories from the
sorted list: no group's longest member grows), but the worker order is free. For a budget ``C``
the greedy argument of ``heddle.policy.placement.bottleneck`` extends to a dynamic programme over
how many workers of each type have been used: ``reach[u]`` = the furthest position of the sorted
list that ``u`` (a count per type) can cover, ``reach[u] = max_t reach[u - e_t] + longest affordable
block of type t``. Covering more is never worse, so the maximum suffices. States: ``prod(count_t +
1)`` (at most a few thousand for a 64-GPU mix of TP 1/2/4/8), ``num_types`` bisections each.

``minimise_over_orders`` uses it to certify a heuristic makespan (one probe just below it) and,
if it is not optimal, to bisect down to the exact optimum over candidate values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.placement.bisection import bisect_makespan
from heddle.policy.placement.blocks import BlockTable, block_cost, max_block


@dataclass(frozen=True, slots=True)
class TypedSplit:
    """Worker types in placement order (one per worker) with their block sizes."""

    types: list[int]
    sizes: list[int]
    makespan: float


def _radices(counts: Sequence[int]) -> list[int]:
    strides = []
    stride = 1
    for count in counts:
        strides.append(stride)
        stride *= count + 1
    return strides


def feasible_split(
    lengths: Sequence[float],
    tables: Sequence[BlockTable],
    counts: Sequence[int],
    budget: float,
) -> TypedSplit | None:
    """A split of makespan <= ``budget`` using at most ``counts[t]`` workers of type ``t`` in
    some order, or None if no order admits one."""
    num_items = len(lengths)
    strides = _radices(counts)
    num_states = strides[-1] * (counts[-1] + 1)
    reach = [0] * num_states
    came_from = [-1] * num_states
    for state in range(1, num_states):
        best_reach, best_type = -1, -1
        for kind, stride in enumerate(strides):
            if (state // stride) % (counts[kind] + 1) == 0:
                continue
            start = reach[state - stride]
            covered = start
            if start < num_items:
                covered += max_block(tables[kind], lengths[start], budget, num_items - start)
            if covered > best_reach:
                best_reach, best_type = covered, kind
        reach[state], came_from[state] = best_reach, best_type
        if best_reach >= num_items:
            return _unwind(lengths, tables, strides, reach, came_from, state)
    return None


def _unwind(
    lengths: Sequence[float],
    tables: Sequence[BlockTable],
    strides: Sequence[int],
    reach: Sequence[int],
    came_from: Sequence[int],
    state: int,
) -> TypedSplit:
    types: list[int] = []
    sizes: list[int] = []
    while state:
        kind = came_from[state]
        previous = state - strides[kind]
        types.append(kind)
        sizes.append(reach[state] - reach[previous])
        state = previous
    types.reverse()
    sizes.reverse()
    makespan = 0.0
    position = 0
    for kind, size in zip(types, sizes, strict=True):
        if size:
            makespan = max(makespan, block_cost(tables[kind], lengths[position], size))
        position += size
    return TypedSplit(types, sizes, makespan)


def minimise_over_orders(
    lengths: Sequence[float],
    tables: Sequence[BlockTable],
    counts: Sequence[int],
    incumbent: TypedSplit,
) -> TypedSplit:
    """The exact optimum over all worker orders, starting from a feasible ``incumbent``.

    Every makespan is a product ``T F(z) L_s``, so the optimum is the smallest such value that is
    feasible. One probe just below the incumbent certifies it (the common case); otherwise
    bisection between an infeasible ``low`` and the best split found, snapping ``high`` to the
    real makespan of each feasible probe, until no float lies strictly between them.
    """
    best = incumbent
    if best.makespan == math.inf:
        return best
    low = math.nextafter(_lower_bound(lengths, tables), -math.inf)
    return bisect_makespan(best, low, lambda probe: feasible_split(lengths, tables, counts, probe))


def _lower_bound(lengths: Sequence[float], tables: Sequence[BlockTable]) -> float:
    """The longest trajectory alone on the cheapest worker type: no split does better."""
    return min(block_cost(table, lengths[0], 1) for table in tables)
