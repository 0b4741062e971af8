"""The online predictor: ridge from sufficient statistics equals a brute-force fit, training uses
the features predictions saw, it learns what the baselines cannot, and it stays finite."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.prediction import (
    HistoryPredictor,
    Outcome,
    Progress,
    fit,
    make_predictor,
    predict_tool_s,
    prediction_quality,
    progress_of,
    remaining_tool_s,
)
from heddle.policy.prediction.online import (
    FEATURE_NAMES,
    NUM_FEATURES,
    OnlineModelConfig,
    OnlinePredictor,
    SufficientStats,
    features_of,
)
from heddle.policy.prediction.online_features import GroupStats, Survival
from heddle.policy.prediction.quality import _pearson
from heddle.traces import TraceStep, TraceTrajectory

samples = st.lists(
    st.tuples(
        st.lists(st.floats(-5, 5), min_size=NUM_FEATURES - 1, max_size=NUM_FEATURES - 1),
        st.floats(0, 12),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60)
@given(rows=samples, ridge=st.floats(0.01, 10))
def test_ridge_from_sufficient_statistics_equals_brute_force(
    rows: list[tuple[list[float], float]], ridge: float
) -> None:
    stats = SufficientStats()
    xs = np.array([[1.0, *x] for x, _ in rows])
    ys = np.array([y for _, y in rows])
    for x, y in zip(xs, ys, strict=True):
        stats.add(x, float(y))
    weights, variance = stats.solve(ridge)
    penalty = np.diag([1e-9] + [ridge] * (NUM_FEATURES - 1))
    expected = np.linalg.solve(xs.T @ xs + penalty, xs.T @ ys)
    assert np.allclose(weights, expected, rtol=1e-6, atol=1e-6)
    rss = float(np.sum((xs @ expected - ys) ** 2))
    expected_variance = rss / max(1, len(rows) - NUM_FEATURES)
    assert math.isclose(variance, expected_variance, rel_tol=1e-5, abs_tol=1e-5)


def trajectory(
    traj_id: str, outputs: list[int], group: str, prompt: int = 200, tool_tokens: int = 30
) -> TraceTrajectory:
    steps = [
        TraceStep(output_tokens=n, tool_s=1.5, tool_output_tokens=tool_tokens) for n in outputs
    ]
    return TraceTrajectory(id=traj_id, group=group, prompt_tokens=prompt, steps=steps)


def synthetic_workload(num_groups: int, group_size: int, seed: int) -> list[TraceTrajectory]:
    """Groups differ a lot in length (the prompt's difficulty); samples vary within a group."""
    rng = random.Random(seed)
    trace = []
    for g in range(num_groups):
        scale = rng.choice([50, 200, 1000, 4000])
        for s in range(group_size):
            num_steps = rng.randint(1, 6)
            outputs = [
                max(1, int(rng.lognormvariate(math.log(scale), 0.3))) for _ in range(num_steps)
            ]
            trace.append(trajectory(f"g{g}-s{s}-{seed}", outputs, f"g{g}"))
    return trace


def test_it_learns_group_difficulty_that_the_history_baseline_cannot_see() -> None:
    history = synthetic_workload(40, 8, seed=1)
    current = synthetic_workload(40, 8, seed=1)  # same prompts (groups), new samples
    rng = random.Random(7)
    current = [
        trajectory(
            f"new-{t.id}",
            [max(1, int(s.output_tokens * rng.uniform(0.7, 1.3))) for s in t.steps],
            t.group,
        )
        for t in current
    ]
    online = OnlinePredictor(OnlineModelConfig(min_samples=16))
    for t in history:
        online.observe_trace(t)
    baseline = fit(HistoryPredictor(8192.0), history)
    ours = prediction_quality(online, current, num_steps=1)
    theirs = prediction_quality(baseline, current, num_steps=1)
    assert ours.pearson > 0.8
    assert ours.pearson > theirs.pearson + 0.2


def test_training_uses_the_snapshots_predictions_saw() -> None:
    online = OnlinePredictor()
    t = trajectory("t1", [100, 200, 300], "g")
    expected = []
    for k in range(3):
        progress = progress_of(t, k)
        online.predict(progress)
        remaining = float(sum([100, 200, 300][k:]))
        expected.append((features_of(progress, None, Survival()), remaining))
    online.observe(Outcome("t1", "g", 200, (100, 200, 300)))
    assert online.num_samples == 3
    xty = sum(f * math.log1p(y) for f, y in expected)
    assert np.allclose(online.stats.xty, xty)


def test_snapshots_of_another_context_are_not_used() -> None:
    online = OnlinePredictor()
    online.predict(Progress("t1", "g", 200, num_steps=1, output_tokens=999))
    online.observe(Outcome("t1", "g", 200, (100, 200)))
    # The snapshot does not match the outcome's first step: the outcome is decomposed instead.
    assert online.num_samples == 2
    assert online.stats.xtx[4, 0] == math.log1p(0) + math.log1p(100)


def test_fallback_before_enough_samples_is_the_group_mean_minus_progress() -> None:
    online = OnlinePredictor(OnlineModelConfig(min_samples=100, prior_total_tokens=500))
    assert online.predict(Progress("a", "g", 10, output_tokens=100)) == 400
    online.observe(Outcome("x", "g", 10, (1000, 1000)))
    assert online.predict(Progress("b", "g", 10, output_tokens=500)) == 1500
    assert online.predict(Progress("c", "other", 10, output_tokens=600)) == 0


def test_same_history_same_predictions() -> None:
    trace = synthetic_workload(10, 4, seed=3)
    a, b = (
        OnlinePredictor(OnlineModelConfig(min_samples=8)),
        OnlinePredictor(OnlineModelConfig(min_samples=8)),
    )
    for t in trace:
        a.observe_trace(t)
        b.observe_trace(t)
    probe = progress_of(trace[0], 1)
    assert a.predict(probe) == b.predict(probe)


progresses = st.builds(
    Progress,
    traj_id=st.sampled_from(["a", "b"]),
    group_id=st.sampled_from(["", "g"]),
    prompt_tokens=st.integers(0, 10**6),
    num_steps=st.integers(0, 500),
    output_tokens=st.integers(0, 10**7),
    tool_output_tokens=st.integers(0, 10**7),
    tool_s=st.floats(0, 1e6),
    first_output_tokens=st.integers(0, 10**6),
    last_output_tokens=st.integers(0, 10**6),
)


@settings(max_examples=80)
@given(progress=progresses)
def test_predictions_are_finite_and_non_negative(progress: Progress) -> None:
    online = OnlinePredictor(OnlineModelConfig(min_samples=4))
    for t in synthetic_workload(4, 4, seed=5):
        online.observe_trace(t)
    value = online.predict(progress)
    assert math.isfinite(value) and value >= 0


def test_outcomes_from_traces_carry_their_tool_figures() -> None:
    with_tools = OnlinePredictor()
    with_tools.observe(Outcome.from_trace(trajectory("t", [10, 20, 30], "g", tool_tokens=50)))
    column = FEATURE_NAMES.index("log_tool_output_tokens")
    # Samples at the tool calls of steps 1 and 2 saw 0 and 50 observation tokens (a prediction
    # runs while its step's call is in flight).
    assert math.isclose(with_tools.stats.xtx[column, 0], math.log1p(0) + math.log1p(50))
    registered = make_predictor("online")
    assert isinstance(registered, OnlinePredictor)


@settings(max_examples=80)
@given(counts=st.lists(st.integers(1, 40), min_size=0, max_size=30), k=st.integers(0, 45))
def test_survival_is_the_conditional_mean_of_remaining_steps(counts: list[int], k: int) -> None:
    survival, group = Survival(), GroupStats()
    for n in counts:
        survival.add(n)
        group.add(10.0 * n, n)
    longer = [n - k for n in counts if n > k]
    expected = sum(longer) / len(longer) if longer else None
    assert survival.remaining_steps(k) == pytest.approx(expected if longer else 1.0)
    assert group.remaining_steps(k) == pytest.approx(expected if longer else 0.0)


def test_it_learns_that_a_long_survivor_has_long_to_go() -> None:
    """Step counts are heavy-tailed and independent of step sizes: only survival tells a
    trajectory at step 6 that it is probably long (the history baseline sees it too)."""
    rng = random.Random(3)
    trace = [
        trajectory(f"t{i}", [100] * max(1, int(rng.paretovariate(1.2))), f"g{i}")
        for i in range(600)
    ]
    online = OnlinePredictor(OnlineModelConfig(min_samples=16))
    for t in trace[:400]:
        online.observe_trace(t)
    at_six = [t for t in trace[400:] if len(t.steps) > 6]
    at_one = [t for t in trace[400:] if len(t.steps) > 1]
    mean_six = sum(online.predict(progress_of(t, 6)) for t in at_six) / len(at_six)
    mean_one = sum(online.predict(progress_of(t, 1)) for t in at_one) / len(at_one)
    assert mean_six > 2 * mean_one


def test_tool_time_is_learnt_from_outcomes_with_tool_figures() -> None:
    """Each call takes 1.5 s (``trajectory``) and a prompt fixes its samples' step count, so
    the siblings of earlier rollouts tell how much tool time is left."""
    rng = random.Random(4)
    steps_of = {f"g{g}": rng.randint(2, 12) for g in range(40)}

    def rollout(tag: str) -> list[TraceTrajectory]:
        return [
            trajectory(f"{tag}-{group}-{s}", [rng.randint(50, 150)] * n, group)
            for group, n in steps_of.items()
            for s in range(4)
        ]

    history, current = rollout("old"), rollout("new")
    online = OnlinePredictor(OnlineModelConfig(min_samples=16))
    assert predict_tool_s(online, progress_of(current[0], 0)) == 0.0  # not fitted yet
    for t in history:
        online.observe_trace(t)
    truth = [remaining_tool_s(t.steps, 1) for t in current]
    guess = [predict_tool_s(online, progress_of(t, 1)) for t in current]
    assert _pearson(truth, guess) > 0.8
    assert all(math.isfinite(g) and g >= 0 for g in guess)
