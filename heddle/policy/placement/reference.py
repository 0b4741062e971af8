"""The paper's presorted placement DP (docs/paper.md, the paper's s.5), the reference for the fast
solver.

    dp[i][1] = T F(i) L_1;   dp[i][j] = min_k max(dp[k][j-1], T F(i-k) L_{k+1})

over lengths sorted longest first; ``O(n^2 m)``. The inner minimum over the split point ``k`` is
one numpy expression per ``(i, j)``, so ``n = 6400, m = 16`` takes seconds instead of the hours a
pure-Python triple loop would. Workers may stay empty (``dp[i][j] <= dp[i][j-1]``), matching the
fast solver's contract. Blocks are priced exactly as ``heddle.policy.placement.blocks.block_cost``
prices them (IEEE products of the same operands), so both solvers' makespans agree bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from heddle.policy.placement.blocks import BlockTable


def presorted_dp(
    sorted_lengths: Sequence[float], table: BlockTable, num_workers: int
) -> tuple[list[int], float]:
    """Block sizes per worker and the optimal makespan (``inf`` when no split is finite)."""
    lengths = np.asarray(sorted_lengths, dtype=np.float64)
    num_items = len(lengths)
    prices = np.asarray(table.values[: table.num_finite], dtype=np.float64)
    best = _single_worker(lengths, prices, num_items)
    choices: list[npt.NDArray[np.int64]] = []
    for _ in range(1, num_workers):
        best, choice = _add_worker(lengths, prices, best)
        choices.append(choice)
    makespan = float(best[num_items])
    return _sizes(choices, num_items), makespan


def _single_worker(
    lengths: npt.NDArray[np.float64], prices: npt.NDArray[np.float64], num_items: int
) -> npt.NDArray[np.float64]:
    """dp[i][1] for i = 0..n: the first i trajectories on one worker."""
    best = np.full(num_items + 1, math.inf)
    best[0] = 0.0
    num_finite = min(len(prices), num_items)
    best[1 : num_finite + 1] = prices[:num_finite] * lengths[0]
    return best


def _add_worker(
    lengths: npt.NDArray[np.float64],
    prices: npt.NDArray[np.float64],
    previous: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """dp[.][j] from dp[.][j-1]; ``choice[i]`` is the split k (``k == i``: this worker is empty).

    Splits with a last block longer than the KV cap cost inf and are skipped, so ``0 * inf``
    never appears."""
    num_items = len(lengths)
    best = previous.copy()
    choice = np.arange(num_items + 1, dtype=np.int64)
    num_finite = len(prices)
    for end in range(1, num_items + 1):
        first_split = max(0, end - num_finite)
        # Block k..end-1 has size end-k: prices[end-k-1] for k = first_split .. end-1.
        block = prices[: end - first_split][::-1]
        candidates = np.maximum(previous[first_split:end], block * lengths[first_split:end])
        split = int(np.argmin(candidates))
        if candidates[split] < best[end]:
            best[end] = candidates[split]
            choice[end] = first_split + split
    return best, choice


def _sizes(choices: list[npt.NDArray[np.int64]], num_items: int) -> list[int]:
    sizes: list[int] = []
    end = num_items
    for choice in reversed(choices):
        split = int(choice[end])
        sizes.append(end - split)
        end = split
    sizes.append(end)
    return sizes[::-1]
