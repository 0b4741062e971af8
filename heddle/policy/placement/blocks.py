"""Contiguous blocks of a presorted length list: the shared core of the placement solvers.

Trajectories are sorted by length, longest first (``L_0 >= L_1 >= ...``). A *block* is a run
``s .. s+z-1`` of that order placed on one worker; it costs ``table[z-1] * L_s`` where
``table[z-1] = T * F(z)`` is the worker's per-token time times its interference factor at batch
``z`` (docs/paper.md, the paper's s.5). An infinite table entry (a KV-capacity cap) makes any
block of that size infeasible, whatever its length, including zero-length trajectories
(``0 * inf`` is never used).

Every solver (fast, reference DP, heterogeneous, brute force in tests) prices a block with
``block_cost`` so their makespans agree to the last bit.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Interference = Callable[[int], float]
"""F: group size -> interference factor (>= 0, non-decreasing, ``math.inf`` past a cap)."""


@dataclass(frozen=True, slots=True)
class Partition:
    """Input indices per worker (one list per worker, possibly empty) and the makespan."""

    groups: list[list[int]]
    makespan: float

    @property
    def num_workers(self) -> int:
        return len(self.groups)

    def worker_of(self) -> dict[int, int]:
        """Input index -> worker index."""
        return {index: worker for worker, group in enumerate(self.groups) for index in group}


def groups_from_sizes(order: Sequence[int], sizes: Sequence[int]) -> list[list[int]]:
    """Cut ``order`` (input indices, longest first) into consecutive groups of ``sizes``."""
    groups: list[list[int]] = []
    position = 0
    for size in sizes:
        groups.append(list(order[position : position + size]))
        position += size
    return groups


def check_lengths(lengths: Sequence[float]) -> list[float]:
    """The lengths as floats; ``ValueError`` for an empty list, a negative, NaN or inf length."""
    if len(lengths) == 0:
        raise ValueError("lengths is empty: nothing to place")
    values = [float(x) for x in lengths]
    # One C-speed pass catches NaN and inf (they poison the sum); a second catches negatives.
    if math.isfinite(math.fsum(values)) and min(values) >= 0.0:
        return values
    for index, value in enumerate(values):
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"lengths[{index}] = {value!r}: lengths must be finite and >= 0")
    raise ValueError("lengths sum to a non-finite total")


def check_num_workers(num_workers: int) -> None:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")


def longest_first(values: Sequence[float]) -> list[int]:
    """Indices ordered by length, longest first; equal lengths keep input order (determinism)."""
    # Python's sort is stable even with reverse=True.
    return sorted(range(len(values)), key=values.__getitem__, reverse=True)


@dataclass(frozen=True, slots=True)
class BlockTable:
    """One worker type's block prices: ``values[z-1] = T * F(z)`` for ``z = 1 .. len(values)``."""

    values: list[float]
    num_finite: int
    """The largest group size with a finite price (the KV cap, or the table length)."""


def cost_table(
    interference: Callable[[int], float], max_size: int, per_token_s: float = 1.0
) -> BlockTable:
    """Tabulate ``T * F(z)`` for ``z = 1 .. max_size``; F must be >= 0, not NaN, non-decreasing."""
    if not math.isfinite(per_token_s) or per_token_s <= 0.0:
        raise ValueError(f"per-token time must be finite and > 0, got {per_token_s!r}")
    factors = [float(interference(size)) for size in range(1, max_size + 1)]
    # Fast path in C; NaN fails every comparison, so it also lands in the explaining loop.
    if factors and not (factors[0] >= 0.0 and all(map(operator.le, factors, factors[1:]))):
        _explain_bad_factors(factors)
    values = factors if per_token_s == 1.0 else [per_token_s * factor for factor in factors]
    return BlockTable(values, bisect_left(values, math.inf))


def _explain_bad_factors(factors: Sequence[float]) -> None:
    previous = 0.0
    for size, factor in enumerate(factors, start=1):
        if math.isnan(factor) or factor < 0.0:
            raise ValueError(f"interference({size}) = {factor!r}: must be >= 0 and not NaN")
        if factor < previous:
            raise ValueError(
                f"interference must be non-decreasing in group size: "
                f"F({size - 1}) = {previous!r} > F({size}) = {factor!r}"
            )
        previous = factor


def block_cost(table: BlockTable, length: float, size: int) -> float:
    """The price of a block of ``size`` trajectories led by one of ``length`` (0 for no block)."""
    if size == 0:
        return 0.0
    if size > table.num_finite:
        return math.inf
    return table.values[size - 1] * length


def max_block(table: BlockTable, length: float, budget: float, limit: int) -> int:
    """The largest ``z <= limit`` whose block led by ``length`` costs at most ``budget``.

    The bisection compares ``F <= budget / length``; division can round differently from the
    product ``F * length`` that ``block_cost`` uses, so the answer is checked against the product
    and, in the rare disagreement, recomputed with the product itself as the key.
    """
    hi = min(limit, table.num_finite)
    if hi <= 0 or budget < 0.0:
        return 0
    if length == 0.0 or budget == math.inf:
        return hi
    values = table.values
    size = bisect_right(values, budget / length, 0, hi)
    too_small = size < hi and values[size] * length <= budget
    too_large = size > 0 and values[size - 1] * length > budget
    if too_small or too_large:
        size = bisect_right(values, budget, 0, hi, key=lambda factor: factor * length)
    return size
