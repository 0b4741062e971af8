import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads import summarize
from heddle.workloads.stats import group_explained_variance


def _trajectory(index: int, group: str, outputs: list[int]) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=1.0, tool_output_tokens=10) for n in outputs[:-1]]
    steps.append(TraceStep(output_tokens=outputs[-1]))
    return TraceTrajectory(id=f"t{index}", group=group, prompt_tokens=100, steps=steps)


def test_summary_of_a_small_trace() -> None:
    trace = [
        _trajectory(0, "a", [100, 100]),
        _trajectory(1, "a", [300]),
        _trajectory(2, "b", [1000, 200, 400]),
    ]
    summary = summarize(trace)
    assert summary.num_trajectories == 3
    assert summary.num_groups == 2
    assert summary.mean_turns == pytest.approx(2.0)
    assert summary.max_turns == 3
    assert summary.median_output_tokens == 300
    assert summary.max_output_tokens == 1600
    assert summary.tail_ratio == pytest.approx(1600 / 300)
    assert summary.median_tool_call_s == 1.0
    assert summary.median_tool_output_tokens == 10


def test_summary_rejects_an_empty_trace() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 5000)), min_size=1, max_size=40))
def test_group_explained_variance_is_the_r2_of_the_group_mean(rows: list[tuple[int, int]]) -> None:
    trace = [_trajectory(i, f"g{group}", [tokens]) for i, (group, tokens) in enumerate(rows)]
    values = np.array([tokens for _, tokens in rows], dtype=float)
    groups = np.array([group for group, _ in rows])
    predicted = np.array([values[groups == g].mean() for g in groups])
    total = ((values - values.mean()) ** 2).sum()
    expected = 0.0 if total == 0 else 1 - ((values - predicted) ** 2).sum() / total
    assert group_explained_variance(trace) == pytest.approx(expected, abs=1e-9)
