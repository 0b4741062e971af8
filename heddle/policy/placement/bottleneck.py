"""Exact min-makespan split of a presorted length list into contiguous blocks, one per worker in a
fixed order (workers may differ: each has its own ``BlockTable``).

Two ideas from docs/calibration.md s.3 and the chains-on-chains partitioning literature:

* **Decision by greedy.** For a budget ``C``, give each worker in turn the longest block it can
  afford. Taking more never hurts (the rest is a suffix of shorter trajectories, cheaper to
  place), so greedy covers everything iff ``C`` is feasible. ``O(m log n)`` per probe.
* **Exact optimum by Nicol's search** (Nicol, "Rectilinear partitioning of irregular data parallel
  computations", JPDC 1994; Pinar & Aykanat, JPDC 2004). Let ``z*`` be the smallest first-block
  size whose own price ``C1 = cost_0(z*)`` is feasible. Either the optimum is ``C1``, or it is
  smaller: then greedy at the optimum gives the first worker exactly ``z* - 1`` trajectories and
  the optimum is ``max(cost_0(z* - 1), OPT(rest, workers 1..))``. Recursing worker by worker
  costs ``O(m log n)`` probes: ``O(m^2 log^2 n)`` bisections, about a millisecond for
  ``n = 6400, m = 16`` in pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.placement.blocks import BlockTable, block_cost, max_block


@dataclass(frozen=True, slots=True)
class BlockSplit:
    """Block sizes per worker (in the given worker order) and the resulting makespan."""

    sizes: list[int]
    makespan: float


def reach(
    lengths: Sequence[float], tables: Sequence[BlockTable], first: int, start: int, budget: float
) -> int:
    """Where greedy stops: workers ``first..`` each take the longest block they can afford."""
    num_items = len(lengths)
    position = start
    for worker in range(first, len(tables)):
        if position >= num_items:
            break
        position += max_block(tables[worker], lengths[position], budget, num_items - position)
    return position


def greedy_sizes(
    lengths: Sequence[float], tables: Sequence[BlockTable], budget: float
) -> list[int]:
    """The greedy block sizes at ``budget`` (they cover everything iff ``budget`` is feasible)."""
    num_items = len(lengths)
    sizes: list[int] = []
    position = 0
    for table in tables:
        size = 0
        if position < num_items:
            size = max_block(table, lengths[position], budget, num_items - position)
        sizes.append(size)
        position += size
    return sizes


def split_makespan(
    lengths: Sequence[float], tables: Sequence[BlockTable], sizes: Sequence[int]
) -> float:
    makespan = 0.0
    position = 0
    for table, size in zip(tables, sizes, strict=True):
        if size:
            makespan = max(makespan, block_cost(table, lengths[position], size))
        position += size
    return makespan


def _smallest_feasible_size(
    lengths: Sequence[float], tables: Sequence[BlockTable], worker: int, start: int
) -> int | None:
    """The smallest first-block size ``z`` for ``worker`` whose price is a feasible budget for
    the subproblem (items ``start..``, workers ``worker..``); None when no finite size is."""
    num_items = len(lengths)
    table = tables[worker]
    lo, hi = 1, min(num_items - start, table.num_finite)
    if hi < 1:
        return None

    def is_feasible(size: int) -> bool:
        budget = block_cost(table, lengths[start], size)
        return reach(lengths, tables, worker, start, budget) >= num_items

    if not is_feasible(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if is_feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def solve_fixed_order(lengths: Sequence[float], tables: Sequence[BlockTable]) -> BlockSplit:
    """The exact min-makespan contiguous split of ``lengths`` (sorted longest first) over the
    workers ``tables`` in this order; workers may get empty blocks. When no split has a finite
    makespan (KV caps too small), returns near-equal blocks and ``makespan = inf``."""
    split = improve_fixed_order(lengths, tables, math.inf)
    if split is None:
        return BlockSplit(even_sizes(len(lengths), len(tables)), math.inf)
    return split


def improve_fixed_order(
    lengths: Sequence[float], tables: Sequence[BlockTable], upper_bound: float
) -> BlockSplit | None:
    """The optimal split in this worker order if its makespan is below ``upper_bound``, else
    None (the bound prunes the search: callers comparing several orders pass their best)."""
    best = _optimal_makespan(lengths, tables, upper_bound)
    if best >= upper_bound:
        return None
    sizes = greedy_sizes(lengths, tables, best)
    return BlockSplit(sizes, split_makespan(lengths, tables, sizes))


def _optimal_makespan(
    lengths: Sequence[float], tables: Sequence[BlockTable], upper_bound: float
) -> float:
    """Nicol's search (module docstring): the optimum, or ``upper_bound`` if not below it."""
    num_items, num_workers = len(lengths), len(tables)
    # A lower bound for any subproblem: its first item must go to one of the remaining workers.
    cheapest_single = [block_cost(table, 1.0, 1) for table in tables]
    for worker in range(num_workers - 2, -1, -1):
        cheapest_single[worker] = min(cheapest_single[worker], cheapest_single[worker + 1])
    best = upper_bound
    prefix = 0.0
    start = 0
    for worker in range(num_workers):
        if start >= num_items:
            return min(best, prefix)
        if _subproblem_bound(prefix, cheapest_single[worker], lengths[start]) >= best:
            break
        table = tables[worker]
        if worker == num_workers - 1:
            return min(best, max(prefix, block_cost(table, lengths[start], num_items - start)))
        size = _smallest_feasible_size(lengths, tables, worker, start)
        if size is None:
            size = min(num_items - start, table.num_finite) + 1
        else:
            best = min(best, max(prefix, block_cost(table, lengths[start], size)))
        prefix = max(prefix, block_cost(table, lengths[start], size - 1))
        start += size - 1
    return best


def _subproblem_bound(prefix: float, cheapest_price: float, length: float) -> float:
    if cheapest_price == math.inf:
        return math.inf
    return max(prefix, cheapest_price * length)


def even_sizes(num_items: int, num_workers: int) -> list[int]:
    base, extra = divmod(num_items, num_workers)
    return [base + (1 if worker < extra else 0) for worker in range(num_workers)]
