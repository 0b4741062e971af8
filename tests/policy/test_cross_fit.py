"""Cross-fitting: folds split every group evenly, a trajectory is predicted by a model fitted on
the other folds only (its own length never moves its prediction), a completion teaches the one
model that had not learned it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.policy.prediction import Outcome, Progress, PromptOnlyPredictor, fit
from heddle.policy.prediction.cross_fit import CrossFitted, cross_fit, folds_of
from heddle.traces import TraceStep, TraceTrajectory


def trajectory(index: int, outputs: list[int], group: str) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=0.5, tool_output_tokens=3) for n in outputs]
    return TraceTrajectory(id=f"t{index}", group=group, prompt_tokens=50 + index, steps=steps)


histories = st.lists(
    st.tuples(st.lists(st.integers(1, 4000), min_size=1, max_size=4), st.sampled_from("abc")),
    min_size=2,
    max_size=20,
).map(lambda rows: [trajectory(i, out, group) for i, (out, group) in enumerate(rows)])


def cross_fitted_prompt_only(history: list[TraceTrajectory], num_folds: int) -> CrossFitted:
    return cross_fit(
        history,
        [t.id for t in history],
        lambda learned_from: fit(PromptOnlyPredictor(1000.0), learned_from),
        num_folds,
    )


def at_submission(t: TraceTrajectory) -> Progress:
    return Progress(t.id, t.group, t.prompt_tokens)


@given(histories, st.integers(2, 5))
def test_folds_split_every_group_evenly_by_position(
    history: list[TraceTrajectory], num_folds: int
) -> None:
    folds = folds_of(history, num_folds)
    for group in {t.group for t in history}:
        members = [fold for t, fold in zip(history, folds, strict=True) if t.group == group]
        assert members == [position % num_folds for position in range(len(members))]
        sizes = Counter(members)
        assert max(sizes.values()) - min(sizes.get(f, 0) for f in range(num_folds)) <= 1


@given(histories, st.integers(2, 5))
def test_each_trajectory_is_predicted_by_a_model_of_the_other_folds(
    history: list[TraceTrajectory], num_folds: int
) -> None:
    folds = folds_of(history, num_folds)
    predictor = cross_fitted_prompt_only(history, num_folds)
    for t, fold in zip(history, folds, strict=True):
        others = [o for o, f in zip(history, folds, strict=True) if f != fold]
        reference = PromptOnlyPredictor(1000.0)
        fit(reference, others)
        assert predictor.predict(at_submission(t)) == reference.predict(at_submission(t))
        assert predictor.predict_tool_s(at_submission(t)) == pytest.approx(
            reference.predict_tool_s(at_submission(t))
        )


@given(histories, st.integers(0, 19), st.integers(1, 4000))
def test_a_trajectorys_own_length_never_moves_its_prediction(
    history: list[TraceTrajectory], which: int, new_length: int
) -> None:
    index = which % len(history)
    changed = list(history)
    changed[index] = trajectory(index, [new_length], history[index].group)
    target = at_submission(history[index])
    assert cross_fitted_prompt_only(history, 2).predict(target) == (
        cross_fitted_prompt_only(changed, 2).predict(target)
    )


def test_a_completion_teaches_only_the_model_that_had_not_seen_it() -> None:
    history = [trajectory(i, [100], "g") for i in range(4)]
    predictor = cross_fitted_prompt_only(history, 2)
    longer = trajectory(0, [4100], "g")  # t0 (fold 0) completes in the simulated rollout
    predictor.observe(Outcome.from_trace(longer))
    fold_0, fold_1 = predictor.models
    assert fold_0.predict(at_submission(longer)) == pytest.approx((2 * 100 + 4100) / 3)
    assert fold_1.predict(at_submission(longer)) == pytest.approx(100)  # it had learned t0
    assert predictor.name == "prompt_only"


def test_cross_fitting_needs_two_folds() -> None:
    with pytest.raises(ValueError, match="at least 2 folds"):
        folds_of([trajectory(0, [1], "g")], 1)
