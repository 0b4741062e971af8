"""Each workload's summary statistics against its documented ranges (docs/calibration.md s.2)."""

import numpy as np
import pytest

from heddle.traces import TraceTrajectory
from heddle.workloads import WorkloadSummary, generate, summarize

NAMES = ("coding", "search", "math")
SEEDS = (0, 1, 2)


def _summary(name: str, seed: int) -> tuple[list[TraceTrajectory], WorkloadSummary]:
    trace = generate(name, 512, seed=seed)
    return trace, summarize(trace)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_long_tail_max_over_four_times_median(name: str, seed: int) -> None:
    _, summary = _summary(name, seed)
    assert summary.tail_ratio > 4, summary


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_prompt_alone_predicts_length_poorly(name: str, seed: int) -> None:
    """Large within-group variance: the group explains well under half of the variance, yet
    prompts do differ (the difficulty factor)."""
    trace, summary = _summary(name, seed)
    assert 0.05 < summary.group_explained_variance < 0.6
    by_group: dict[str, list[int]] = {}
    for trajectory in trace:
        by_group.setdefault(trajectory.group, []).append(trajectory.num_output_tokens)
    ratios = [max(v) / min(v) for v in by_group.values() if len(v) > 1]
    assert np.median(ratios) > 2, "the same prompt gives very different lengths"


@pytest.mark.parametrize("name", NAMES)
def test_first_step_carries_a_signal_about_the_rest(name: str) -> None:
    trace = generate(name, 1024, seed=0)
    first = np.array([t.steps[0].output_tokens for t in trace])
    rest = np.array([t.num_output_tokens - t.steps[0].output_tokens for t in trace])
    ranks = np.argsort(np.argsort(first)), np.argsort(np.argsort(rest))
    assert np.corrcoef(*ranks)[0, 1] > 0.2


def test_coding_matches_swe_trajectory_shapes() -> None:
    _, summary = _summary("coding", 0)
    assert 16 <= summary.mean_turns <= 64  # SWE datasets: mean 16-64 turns
    assert summary.max_turns == 50  # DeepSWE's cap is reached by the tail
    assert 1000 <= summary.median_prompt_tokens <= 8000
    assert 0.5 <= summary.median_tool_call_s <= 10  # mostly shell actions
    assert summary.max_tool_call_s >= 60  # test runs take minutes


def test_search_matches_search_r1_with_asearcher_tails() -> None:
    _, summary = _summary("search", 0)
    assert 2 <= summary.median_turns <= 4  # Search-R1: 2-4 turns
    assert summary.max_turns > 16  # ASearcher-style long-horizon tail
    assert 250 <= summary.median_turn_output_tokens <= 600  # ~500 tokens per turn
    assert 400 <= summary.median_tool_output_tokens <= 500  # ~500-token observations
    assert 0.1 <= summary.median_tool_call_s <= 2  # search 0.1-2 s
    assert summary.p90_tool_call_s <= 2.5


def test_math_matches_retool() -> None:
    _, summary = _summary("math", 0)
    assert summary.max_turns <= 16  # ReTool: max 16 turns
    assert summary.max_output_tokens <= 16384  # ReTool: 16k response
    assert summary.median_turns <= 5
    assert 0.1 <= summary.median_tool_call_s <= 5  # python sandbox 0.1-5 s
    assert summary.median_tool_output_tokens < 200  # short stdout
