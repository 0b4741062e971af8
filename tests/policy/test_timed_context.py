"""The simulated prediction service: the context model answers when its answer, ``latency_s``
after the tool call, comes before the call returns; the fallback answers otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.policy.prediction import Outcome, Progress, TimedContextPredictor
from heddle.policy.prediction.online import OnlinePredictor


class FixedFallback:
    """A fallback with known answers and a record of what it observed."""

    name = "online"

    def __init__(self) -> None:
        self.observed: list[Outcome] = []

    def predict(self, progress: Progress) -> float:
        return 100.0 + progress.num_steps

    def predict_tool_s(self, progress: Progress) -> float:
        return 10.0

    def observe(self, outcome: Outcome) -> None:
        self.observed.append(outcome)


def context_answer(progress: Progress, baseline: tuple[float, float]) -> tuple[float, float]:
    return baseline[0] * 3 + len(progress.last_tool_text), baseline[1] / 2


def progress(num_steps: int, traj_id: str = "t0") -> Progress:
    return Progress(traj_id, num_steps=num_steps, last_tool_text="2 failed")


@given(
    latency_s=st.floats(0, 1e6, allow_nan=False),
    durations=st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=8),
)
def test_the_context_answers_exactly_when_it_comes_before_the_tool_returns(
    latency_s: float, durations: list[float]
) -> None:
    predictor = TimedContextPredictor(
        FixedFallback(), context_answer, latency_s, lambda _, step: durations[step]
    )
    for step, duration in enumerate(durations):
        seen = progress(step + 1)
        on_time = latency_s <= duration
        tokens, tool_s = predictor.predict(seen), predictor.predict_tool_s(seen)
        expected = context_answer(seen, (101.0 + step, 10.0)) if on_time else (101.0 + step, 10.0)
        assert (tokens, tool_s) == expected
        assert predictor.name == ("context" if on_time else "online")
    on_time = sum(latency_s <= d for d in durations)
    assert predictor.counts == {"on_time": on_time, "late": len(durations) - on_time}


def test_before_the_first_generation_the_fallback_answers_and_nothing_is_asked() -> None:
    predictor = TimedContextPredictor(FixedFallback(), context_answer, 0.0, lambda *_: 5.0)
    assert predictor.predict(progress(0)) == 100.0
    assert predictor.name == "online"
    assert predictor.counts == {"on_time": 0, "late": 0}


def test_the_fallback_learns_the_outcomes() -> None:
    fallback = FixedFallback()
    predictor = TimedContextPredictor(fallback, context_answer, 1.0, lambda *_: 5.0)
    outcome = Outcome("t0", "g0", 10, (5, 6))
    predictor.observe(outcome)
    assert fallback.observed == [outcome]


def test_a_negative_latency_is_refused() -> None:
    with pytest.raises(ValueError, match="latency_s"):
        TimedContextPredictor(OnlinePredictor(), context_answer, -1.0, lambda *_: 0.0)
