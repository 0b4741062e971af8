"""The paper's predictor figures (s.7.2, Fig. 13) over arrays of predictions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike


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


_TIE = 1e-9
"""Two correlations closer than this are equal (rounding, not ranking, tells them apart)."""


def bootstrap_win_share(
    truth: ArrayLike,
    base: ArrayLike,
    candidate: ArrayLike,
    groups: ArrayLike,
    *,
    num_resamples: int = 1000,
    seed: int = 0,
) -> float:
    """Share of paired bootstrap resamples in which ``candidate`` has the higher Pearson r
    with ``truth`` than ``base``. Resampling draws whole groups (``groups[i]``: the group of
    example ``i``, e.g. its trajectory, whose examples are alike), with replacement, as many
    as there are; a resample where either r is undefined, or the two are equal to within
    rounding (``_TIE``), counts as no win."""
    xs = np.asarray(truth, dtype=float)
    labels, group_of = np.unique(np.asarray(groups), return_inverse=True)
    if xs.size < 2 or num_resamples < 1:
        return 0.0
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(labels), np.full(len(labels), 1.0 / len(labels)), num_resamples)
    weights = draws[:, group_of].astype(float)  # resample x example
    r_base = _weighted_r(weights, xs, np.asarray(base, dtype=float))
    r_candidate = _weighted_r(weights, xs, np.asarray(candidate, dtype=float))
    return float((r_candidate > r_base + _TIE).mean())  # a nan on either side compares False


def _weighted_r(weights: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Per row of ``weights``, the Pearson r of ``xs`` and ``ys`` with those example weights
    (nan where either side has no spread)."""
    total = weights.sum(1)
    mean_x = weights @ xs / total
    mean_y = weights @ ys / total
    dx = xs[None, :] - mean_x[:, None]
    dy = ys[None, :] - mean_y[:, None]
    cov = (weights * dx * dy).sum(1)
    var_x = (weights * dx * dx).sum(1)
    var_y = (weights * dy * dy).sum(1)
    # Rounding leaves a constant side a variance of ~1e-32 of its square: no spread.
    spread_x = var_x > 1e-12 * (weights * xs * xs).sum(1)
    spread = spread_x & (var_y > 1e-12 * (weights * ys * ys).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(var_x * var_y)
    return np.where(spread, r, np.nan)
