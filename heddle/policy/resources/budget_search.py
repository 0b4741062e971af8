"""Exact search over every TP configuration of a GPU budget at once (replaces annealing).

The placement objective of ``heddle.policy.resources.problem`` prices a block of the lengths sorted
longest first, ``s .. s+z-1`` on a TP-``p`` worker, at ``T_p F_p(z) L_s``; a configuration's
makespan is its best contiguous cover. Instead of pricing configurations one by one (annealing:
each price is a heterogeneous placement over up to 256 workers), decide a makespan budget ``C``
for all configurations together with a dynamic programme over GPUs:

    reach[g] = max( reach[g-1],  max_p  reach[g-p] + longest block of degree p from there )

``reach[g]`` is the furthest position of the sorted list that workers using at most ``g`` GPUs
can cover within ``C``. Covering more is never worse (the rest is a suffix of shorter
trajectories, and a block that starts later costs no more), so keeping the maximum per ``g`` is
exact, and ``C`` is feasible for the budget iff ``reach[G]`` covers the list. That is
``G x degrees`` block look-ups (bisections) per probe, independent of how many configurations
there are. The optimum is the smallest feasible block price: bisection between an infeasible
lower bound and the best cover found, snapping the upper end to each cover's real makespan,
until no float lies between (as ``heddle.policy.placement.worker_mix.minimise_over_orders``).

The result equals ``exhaustive_search`` (the property tests check it on random small instances)
at a cost of about 60 probes of ``O(G x degrees x log n)``, where the annealer priced hundreds of
configurations with a placement each (6400 trajectories on 256 GPUs: ~0.1 s against ~60 s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.placement.bisection import bisect_makespan
from heddle.policy.placement.blocks import BlockTable, block_cost, max_block


@dataclass(frozen=True, slots=True)
class Cover:
    """Blocks of the sorted lengths in order: the TP degree of each block's worker and its size;
    ``makespan`` is the largest block price; ``unused_gpus`` the budget left over."""

    degrees: list[int]
    sizes: list[int]
    makespan: float
    unused_gpus: int


def cover_within(
    lengths: Sequence[float],
    tables: dict[int, BlockTable],
    num_gpus: int,
    budget: float,
) -> Cover | None:
    """A cover of ``lengths`` (sorted longest first) by workers of the degrees in ``tables``
    with at most ``num_gpus`` GPUs and every block priced <= ``budget``; None if none exists."""
    num_items = len(lengths)
    degrees = sorted(tables)
    reach = [0] * (num_gpus + 1)
    came_from = [0] * (num_gpus + 1)  # the degree of the last worker; 0: a GPU left unused
    for gpus in range(1, num_gpus + 1):
        best, best_degree = reach[gpus - 1], 0
        for degree in degrees:
            if degree > gpus:
                break
            start = reach[gpus - degree]
            if start >= num_items:
                continue
            covered = start + max_block(tables[degree], lengths[start], budget, num_items - start)
            if covered > best:
                best, best_degree = covered, degree
        reach[gpus], came_from[gpus] = best, best_degree
        if best >= num_items:
            return _unwind(lengths, tables, reach, came_from, gpus, num_gpus - gpus)
    return None


def _unwind(
    lengths: Sequence[float],
    tables: dict[int, BlockTable],
    reach: Sequence[int],
    came_from: Sequence[int],
    gpus: int,
    unused: int,
) -> Cover:
    degrees: list[int] = []
    sizes: list[int] = []
    while gpus:
        degree = came_from[gpus]
        if degree == 0:
            gpus -= 1
            unused += 1
            continue
        degrees.append(degree)
        sizes.append(reach[gpus] - reach[gpus - degree])
        gpus -= degree
    degrees.reverse()
    sizes.reverse()
    return Cover(degrees, sizes, cover_makespan(lengths, tables, degrees, sizes), unused)


def cover_makespan(
    lengths: Sequence[float],
    tables: dict[int, BlockTable],
    degrees: Sequence[int],
    sizes: Sequence[int],
) -> float:
    """The largest block price of a cover (``block_cost``, so solvers agree to the last bit)."""
    makespan = 0.0
    position = 0
    for degree, size in zip(degrees, sizes, strict=True):
        if size:
            makespan = max(makespan, block_cost(tables[degree], lengths[position], size))
        position += size
    return makespan


def best_cover(
    lengths: Sequence[float], tables: dict[int, BlockTable], num_gpus: int
) -> Cover | None:
    """The min-makespan cover over every configuration of at most ``num_gpus`` GPUs of the
    degrees in ``tables`` (module docstring); None when no cover has a finite makespan."""
    if not lengths:
        return Cover([], [], 0.0, num_gpus)
    best = cover_within(lengths, tables, num_gpus, math.inf)
    if best is None or best.makespan == math.inf:
        return None
    low = math.nextafter(_lower_bound(lengths, tables), -math.inf)
    return bisect_makespan(best, low, lambda probe: cover_within(lengths, tables, num_gpus, probe))


def _lower_bound(lengths: Sequence[float], tables: dict[int, BlockTable]) -> float:
    """The longest trajectory alone on the cheapest degree: no cover does better."""
    return min(block_cost(table, lengths[0], 1) for table in tables.values())
