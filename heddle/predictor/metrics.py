"""The paper's predictor figures (s.7.2, Fig. 13) over arrays of predictions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def pearson_r(truth: Sequence[float], guess: Sequence[float]) -> float:
    """Pearson correlation (nan when either side is constant or empty)."""
    xs, ys = np.asarray(truth, dtype=float), np.asarray(guess, dtype=float)
    if xs.size < 2 or np.std(xs) <= 0 or np.std(ys) <= 0:
        return math.nan
    return float(np.corrcoef(xs, ys)[0, 1])


def long_tail_recall(
    true_totals: Sequence[float], guessed_totals: Sequence[float], tail_fraction: float = 0.1
) -> float:
    """Share of the truly longest ``tail_fraction`` (by total length) that the guesses also
    rank there (ties broken by position; nan when empty)."""
    if not 0 < tail_fraction <= 1:
        raise ValueError(f"tail_fraction must be in (0, 1], got {tail_fraction}")
    if not len(true_totals):
        return math.nan
    tail = max(1, round(tail_fraction * len(true_totals)))
    true_tail = set(np.argsort(-np.asarray(true_totals, dtype=float), kind="stable")[:tail])
    guessed = set(np.argsort(-np.asarray(guessed_totals, dtype=float), kind="stable")[:tail])
    return len(true_tail & guessed) / tail
