"""Predictors: the oracle is the truth, the noisy oracle is deterministic with the asked error,
the baselines match brute-force definitions, the registry names them."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.prediction import (
    PREDICTORS,
    HistoryPredictor,
    Outcome,
    PredictorOptions,
    Progress,
    PromptOnlyPredictor,
    fit,
    make_predictor,
    predict_tool_s,
    prediction_quality,
    progress_of,
    remaining_tool_s,
)
from heddle.traces import TraceStep, TraceTrajectory


def trajectory(
    traj_id: str, outputs: list[int], group: str = "g", prompt: int = 100
) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=0.5, tool_output_tokens=7) for n in outputs]
    return TraceTrajectory(id=traj_id, group=group, prompt_tokens=prompt, steps=steps)


trajectories = st.lists(
    st.tuples(
        st.lists(st.integers(0, 5000), min_size=1, max_size=8),
        st.sampled_from(["a", "b", "c"]),
        st.integers(1, 4000),
    ),
    min_size=1,
    max_size=12,
).map(
    lambda rows: [
        trajectory(f"t{i}", outputs, group, prompt)
        for i, (outputs, group, prompt) in enumerate(rows)
    ]
)


@settings(max_examples=60)
@given(trace=trajectories)
def test_oracle_predicts_the_true_remaining_output(trace: list[TraceTrajectory]) -> None:
    oracle = make_predictor("oracle", PredictorOptions(trace={t.id: t for t in trace}))
    for t in trace:
        for k in range(len(t.steps) + 1):
            truth = sum(step.output_tokens for step in t.steps[k:])
            assert oracle.predict(progress_of(t, k)) == truth


@settings(max_examples=60)
@given(trace=trajectories)
def test_every_predictor_predicts_tool_time_and_the_oracle_knows_it(
    trace: list[TraceTrajectory],
) -> None:
    """The truth: the calls not yet returned, the one in flight included (``num_steps - 1``
    returned after ``num_steps`` generations), never the last step's."""
    options = PredictorOptions(trace={t.id: t for t in trace})
    oracle = make_predictor("oracle", options)
    for t in trace:
        for k in range(len(t.steps) + 1):
            expected = 0.5 * max(0, len(t.steps) - 1 - max(0, k - 1))
            assert remaining_tool_s(t.steps, k) == pytest.approx(expected)
            assert predict_tool_s(oracle, progress_of(t, k)) == pytest.approx(expected)
    # Every call takes 0.5 s: the mean-based baselines can predict neither below zero nor
    # beyond the longest trajectory's remaining calls (the online model is tested below).
    ceiling = 0.5 * max(len(t.steps) - 1 for t in trace) + 1e-9
    for name in ("prompt_only", "history"):
        predictor = fit(make_predictor(name, options), trace)
        for t in trace:
            assert 0.0 <= predict_tool_s(predictor, progress_of(t, 1)) <= ceiling, name


@settings(max_examples=20)
@given(num_steps=st.integers(2, 8), num_trajectories=st.integers(40, 80))
def test_fitted_predictors_learn_a_fixed_tool_time(num_steps: int, num_trajectories: int) -> None:
    """Where every trajectory makes the same calls, each learned predictor finds their time."""
    trace = [trajectory(f"t{i}", [100] * num_steps) for i in range(num_trajectories)]
    truth = 0.5 * (num_steps - 1)
    for name in ("prompt_only", "history", "online"):
        predictor = fit(make_predictor(name, PredictorOptions(trace={})), trace)
        predicted = predict_tool_s(predictor, progress_of(trace[0], 1))
        assert predicted == pytest.approx(truth, rel=0.1), name


def test_noisy_oracle_error_decays_to_its_floor() -> None:
    trace = [trajectory(f"t{i}", [500] * 12) for i in range(2000)]
    options = PredictorOptions(sigma=0.5, sigma_decay=0.5, sigma_floor=0.25, trace={})
    predictor = make_predictor("noisy_oracle", replace(options, trace={t.id: t for t in trace}))
    for k, expected in ((0, 0.5), (1, 0.375), (10, 0.25)):
        logs = [math.log(predictor.predict(progress_of(t, k)) / (500 * (12 - k))) for t in trace]
        assert statistics.stdev(logs) == pytest.approx(expected, rel=0.1)


def test_noisy_oracle_draws_tool_errors_apart_from_token_errors() -> None:
    trace = [trajectory(f"t{i}", [1000, 2000, 10]) for i in range(2000)]
    options = PredictorOptions(seed=3, sigma=0.4, trace={t.id: t for t in trace})
    noisy = make_predictor("noisy_oracle", options)
    token_logs = [math.log(noisy.predict(progress_of(t, 0)) / 3010) for t in trace]
    tool_logs = [math.log(predict_tool_s(noisy, progress_of(t, 0)) / 1.0) for t in trace]
    assert statistics.stdev(tool_logs) == pytest.approx(0.4, rel=0.1)
    assert abs(np.corrcoef(token_logs, tool_logs)[0, 1]) < 0.1


def test_oracle_refuses_an_unknown_trajectory() -> None:
    oracle = make_predictor("oracle", PredictorOptions(trace={}))
    with pytest.raises(ValueError, match="no trace for trajectory 'x'"):
        oracle.predict(Progress("x"))


def test_noisy_oracle_is_deterministic_and_has_the_asked_error() -> None:
    trace = [trajectory(f"t{i}", [1000, 2000]) for i in range(3000)]
    options = PredictorOptions(seed=7, sigma=0.4, trace={t.id: t for t in trace})
    first = make_predictor("noisy_oracle", options)
    second = make_predictor("noisy_oracle", options)
    logs = []
    for t in trace:
        guess = first.predict(progress_of(t, 0))
        assert guess == second.predict(progress_of(t, 0))
        logs.append(math.log(guess / 3000))
    assert statistics.median(logs) == pytest.approx(0.0, abs=0.05)
    assert statistics.stdev(logs) == pytest.approx(0.4, rel=0.1)
    other_seed = make_predictor(
        "noisy_oracle", PredictorOptions(seed=8, sigma=0.4, trace=options.trace)
    )
    assert other_seed.predict(progress_of(trace[0], 0)) != first.predict(progress_of(trace[0], 0))
    exact = make_predictor("noisy_oracle", PredictorOptions(sigma=0.0, trace=options.trace))
    assert exact.predict(progress_of(trace[0], 1)) == 2000


def test_noisy_oracle_error_shrinks_with_the_step_decay() -> None:
    trace = [trajectory(f"t{i}", [500] * 6) for i in range(2000)]
    options = PredictorOptions(
        sigma=0.8, sigma_decay=0.5, sigma_floor=0.0, trace={t.id: t for t in trace}
    )
    predictor = make_predictor("noisy_oracle", options)
    spread = []
    for k in (0, 3):
        logs = [math.log(predictor.predict(progress_of(t, k)) / (500 * (6 - k))) for t in trace]
        spread.append(statistics.stdev(logs))
    assert spread[0] == pytest.approx(0.8, rel=0.1)
    assert spread[1] == pytest.approx(0.1, rel=0.15)


@settings(max_examples=60)
@given(history=trajectories, probe_prompt=st.integers(1, 4000))
def test_history_baseline_matches_the_brute_force_mean(
    history: list[TraceTrajectory], probe_prompt: int
) -> None:
    predictor = fit(HistoryPredictor(prior_total_tokens=123.0), history)
    deepest = max(len(t.steps) for t in history)
    for k in range(deepest):
        went_on = [t for t in history if len(t.steps) > k]
        expected = statistics.fmean(sum(s.output_tokens for s in t.steps[k:]) for t in went_on)
        progress = Progress("new", prompt_tokens=probe_prompt, num_steps=k)
        assert predictor.predict(progress) == pytest.approx(expected)
    beyond = Progress("new", num_steps=deepest)
    assert predictor.predict(beyond) == pytest.approx(
        statistics.fmean(t.steps[-1].output_tokens for t in history)
    )
    assert HistoryPredictor(123.0).predict(Progress("x", output_tokens=23)) == 100.0


@settings(max_examples=60)
@given(history=trajectories, probe_prompt=st.integers(1, 4000))
def test_prompt_only_baseline_uses_the_group_mean_then_a_least_squares_line(
    history: list[TraceTrajectory], probe_prompt: int
) -> None:
    predictor = fit(PromptOnlyPredictor(prior_total_tokens=50.0), history)
    for group in ("a", "b", "c"):
        members = [t.num_output_tokens for t in history if t.group == group]
        if members:
            progress = Progress("new", group_id=group, prompt_tokens=probe_prompt, output_tokens=10)
            assert predictor.predict(progress) == pytest.approx(
                max(0.0, statistics.fmean(members) - 10)
            )
    xs = np.array([t.prompt_tokens for t in history], dtype=float)
    ys = np.array([t.num_output_tokens for t in history], dtype=float)
    if len(set(xs.tolist())) >= 2:
        slope, intercept = np.polyfit(xs, ys, 1)
        expected = max(0.0, intercept + slope * probe_prompt)
    else:
        expected = float(ys.mean())
    unseen = Progress("new", group_id="unseen", prompt_tokens=probe_prompt)
    assert predictor.predict(unseen) == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_baselines_fall_back_to_the_prior_before_any_observation() -> None:
    fresh = make_predictor("prompt_only", PredictorOptions(prior_total_tokens=900.0))
    assert fresh.predict(Progress("x", group_id="g", output_tokens=100)) == 800.0


def test_registry_and_quality_metrics() -> None:
    assert set(PREDICTORS) >= {"oracle", "noisy_oracle", "prompt_only", "history"}
    with pytest.raises(ValueError, match="unknown predictor 'psychic'"):
        make_predictor("psychic")
    with pytest.raises(ValueError, match="sigma"):
        PredictorOptions(sigma=-1.0)
    trace = [trajectory(f"t{i}", [100 * (i + 1), 50]) for i in range(20)]
    oracle = make_predictor("oracle", PredictorOptions(trace={t.id: t for t in trace}))
    quality = prediction_quality(oracle, trace, num_steps=0, tail_fraction=0.2)
    assert quality.pearson == pytest.approx(1.0) and quality.tail_recall == 1.0
    reversed_guess = fit(make_predictor("history"), trace)  # constant guess: no correlation
    assert math.isnan(prediction_quality(reversed_guess, trace).pearson)


def test_progress_accumulates_steps() -> None:
    progress = Progress("t").after_generation(10).after_tool(5, 1.5).after_generation(20)
    assert (progress.num_steps, progress.output_tokens, progress.tool_output_tokens) == (2, 30, 5)
    assert (progress.first_output_tokens, progress.last_output_tokens, progress.tool_s) == (
        10,
        20,
        1.5,
    )
    assert Outcome.from_trace(trajectory("t", [3, 4])).total_output_tokens == 7
