"""The paired bootstrap that guards a trained correction, against a loop over explicit resamples."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.context_model.metrics import bootstrap_win_share, pearson_r


def brute_win_share(
    truth: list[float],
    base: list[float],
    candidate: list[float],
    groups: list[int],
    num_resamples: int,
    seed: int,
) -> float:
    """The same draws (one multinomial row of group counts per resample), each resample built
    as an explicit list with every drawn group's examples repeated."""
    labels = sorted(set(groups))
    draws = np.random.default_rng(seed).multinomial(
        len(labels), np.full(len(labels), 1.0 / len(labels)), num_resamples
    )
    wins = 0
    for counts in draws:
        rows = [i for i, g in enumerate(groups) for _ in range(counts[labels.index(g)])]
        t = [truth[i] for i in rows]
        r_base = pearson_r(t, [base[i] for i in rows])
        r_candidate = pearson_r(t, [candidate[i] for i in rows])
        wins += bool(r_candidate > r_base + 1e-9)  # nan on either side, or a tie: no win
    return wins / num_resamples


values = st.integers(0, 50).map(float)  # small integers: ties and constant sides happen


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(values, values, values, st.integers(0, 5)), min_size=2, max_size=14),
    seed=st.integers(0, 3),
)
def test_the_win_share_matches_explicit_resamples(
    rows: list[tuple[float, float, float, int]], seed: int
) -> None:
    truth, base, candidate, groups = (list(column) for column in zip(*rows, strict=True))
    got = bootstrap_win_share(truth, base, candidate, groups, num_resamples=40, seed=seed)
    expected = brute_win_share(truth, base, candidate, groups, 40, seed)
    assert got == expected


def test_a_better_ranking_wins_almost_every_resample_and_noise_about_half() -> None:
    rng = np.random.default_rng(0)
    truth = rng.lognormal(6.0, 1.0, 400)
    groups = np.repeat(np.arange(80), 5)
    good = truth * rng.lognormal(0.0, 0.2, 400)
    poor = truth * rng.lognormal(0.0, 1.5, 400)
    assert bootstrap_win_share(truth, poor, good, groups) > 0.99
    assert bootstrap_win_share(truth, good, poor, groups) < 0.01
    other = truth * rng.lognormal(0.0, 1.5, 400)  # as poor as ``poor``: a coin toss
    assert 0.05 < bootstrap_win_share(truth, poor, other, groups) < 0.95
    assert bootstrap_win_share(truth, good, good, groups) == 0.0  # equal is no win
