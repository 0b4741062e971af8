"""Placement over heterogeneous workers (different TP degrees: each its own T and F).

    makespan = max over workers w of  T_w * F_w(|g_w|) * max_{t in g_w} L(t)

Groups are contiguous runs of the lengths sorted longest first (the lemma holds for any worker
speeds; see ``heddle.policy.placement.worker_mix``), but which worker takes which run is free. The
solver:

1. *Type orders* (docs/calibration.md s.3): for each order of the distinct worker types,
   workers of a type side by side, solve the fixed-order problem exactly
   (``heddle.policy.placement.bottleneck``), each search pruned by the best makespan so far. Up to
   ``MAX_TYPE_ORDERS`` orders are tried (all of them for up to 5 types); beyond that,
   fastest-first and slowest-first.
2. *Certificate* (``exact=True``, the default): the worker-mix dynamic programme checks whether
   any interleaving of workers beats step 1 and, if one does, descends to the exact optimum.
   With ``exact=False`` step 1 alone runs; it was optimal in every random test of
   docs/calibration.md s.3 but is not guaranteed (the annealer uses it, then certifies its
   final plan).

Ties are broken deterministically: type orders are tried in a fixed sequence, a later one must be
strictly better to win, and within a type blocks go to that type's workers in input order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice, permutations

from heddle.policy.placement.blocks import (
    BlockTable,
    Interference,
    Partition,
    check_lengths,
    cost_table,
    groups_from_sizes,
    longest_first,
)
from heddle.policy.placement.bottleneck import even_sizes, improve_fixed_order
from heddle.policy.placement.worker_mix import TypedSplit, minimise_over_orders

MAX_TYPE_ORDERS = 120


@dataclass(frozen=True, slots=True)
class WorkerModel:
    """One worker: per-token time ``T`` alone (seconds, batch 1) and its interference ``F``.

    Workers with equal ``per_token_s`` and equal ``interference`` (``==``; use a value object such
    as ``heddle.policy.resources.problem.TabulatedInterference`` rather than fresh lambdas) form one
    type.
    """

    per_token_s: float
    interference: Interference
    name: str = ""


@dataclass(frozen=True, slots=True)
class _WorkerTypes:
    members: list[list[int]]
    """Input worker indices of each type, in input order."""
    tables: list[BlockTable]


def partition_heterogeneous(
    lengths: Sequence[float], workers: Sequence[WorkerModel], *, exact: bool = True
) -> Partition:
    """Min-makespan placement of ``lengths`` on ``workers``; groups are in INPUT worker order.

    Raises ``ValueError`` for invalid lengths, no workers, a non-positive per-token time or a bad
    interference function (see ``heddle.policy.placement.presorted.partition``).
    """
    values = check_lengths(lengths)
    if len(workers) == 0:
        raise ValueError("workers is empty: need at least one worker")
    order = longest_first(values)
    sorted_lengths = [values[index] for index in order]
    kinds = _worker_types(workers, len(values))
    counts = [len(members) for members in kinds.members]
    best = solve_typed(sorted_lengths, kinds.tables, counts, exact=exact)
    if best.makespan == math.inf:
        sizes = even_sizes(len(values), len(workers))
        return Partition(groups_from_sizes(order, sizes), math.inf)
    return Partition(_groups_by_worker(order, best, kinds, len(workers)), best.makespan)


def solve_typed(
    sorted_lengths: Sequence[float],
    tables: Sequence[BlockTable],
    counts: Sequence[int],
    *,
    exact: bool = True,
) -> TypedSplit:
    """The core on prepared inputs: lengths sorted longest first, one cost table and a worker
    count per type. Callers that solve many worker mixes over the same lengths (the resource
    manager) build the tables once and call this."""
    best = _best_type_order(sorted_lengths, tables, counts)
    if exact and len(tables) > 1:
        best = minimise_over_orders(sorted_lengths, tables, counts, best)
    return best


def _worker_types(workers: Sequence[WorkerModel], num_items: int) -> _WorkerTypes:
    keys: list[tuple[float, Interference]] = []
    members: list[list[int]] = []
    for index, worker in enumerate(workers):
        key = (worker.per_token_s, worker.interference)
        if key in keys:
            members[keys.index(key)].append(index)
        else:
            keys.append(key)
            members.append([index])
    tables = [
        cost_table(interference, num_items, per_token_s) for per_token_s, interference in keys
    ]
    return _WorkerTypes(members, tables)


def _type_orders(tables: Sequence[BlockTable]) -> list[tuple[int, ...]]:
    num_types = len(tables)
    if math.factorial(num_types) <= MAX_TYPE_ORDERS:
        return list(islice(permutations(range(num_types)), MAX_TYPE_ORDERS))
    by_speed = sorted(range(num_types), key=lambda kind: tables[kind].values[0])
    return [tuple(by_speed), tuple(reversed(by_speed))]


def _best_type_order(
    sorted_lengths: Sequence[float], tables: Sequence[BlockTable], counts: Sequence[int]
) -> TypedSplit:
    best = TypedSplit([], [], math.inf)
    for type_order in _type_orders(tables):
        types = [kind for kind in type_order for _ in range(counts[kind])]
        split = improve_fixed_order(sorted_lengths, [tables[k] for k in types], best.makespan)
        if split is not None:
            best = TypedSplit(types, split.sizes, split.makespan)
    return best


def _groups_by_worker(
    order: Sequence[int], split: TypedSplit, kinds: _WorkerTypes, num_workers: int
) -> list[list[int]]:
    groups: list[list[int]] = [[] for _ in range(num_workers)]
    next_member = [0] * len(kinds.members)
    position = 0
    for kind, size in zip(split.types, split.sizes, strict=True):
        worker = kinds.members[kind][next_member[kind]]
        next_member[kind] += 1
        groups[worker] = list(order[position : position + size])
        position += size
    return groups
