"""The hunter's ``wide`` family: its ranges span issue 36's dimensions, it never joins a mix, and
tool bursts make runs of one tool kind while keeping each kind's share."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from heddle.workloads.agent_shape import AgentWorkload, sample_shape
from heddle.workloads.distributions import LogNormal
from heddle.workloads.spec import ToolModel
from heddle.workloads.zoo import WIDE, MixParams, leaf_params_type, zoo_family
from heddle.workloads.zoo_wide import MOST_TURNS, WideParams


def test_the_ranges_span_the_issue_s_dimensions() -> None:
    ranges = WideParams.RANGES
    assert (ranges["max_turns"].low, ranges["max_turns"].high) == (1, MOST_TURNS)
    assert ranges["tail_min_turns"].high * ranges["tail_span"].high >= MOST_TURNS
    assert (ranges["group_size"].low, ranges["group_size"].high) == (1, 16)
    assert (ranges["prompt_median_tokens"].low, ranges["prompt_median_tokens"].high) == (
        100,
        20000,
    )
    assert ranges["output_median_tokens"].low == 50
    assert ranges["max_observation_tokens"].high == 16384
    assert ranges["max_context_tokens"].high == 131072
    assert ranges["test_median_s"].low == 30 and ranges["test_median_s"].high == 300
    assert ranges["quick_median_s"].high <= 1.0


def test_wide_is_a_named_family_that_never_joins_a_mix() -> None:
    assert leaf_params_type(WIDE) is WideParams
    for seed in range(40):
        params = zoo_family("mix").draw(random.Random(seed))
        assert isinstance(params, MixParams)
        assert WIDE not in {member.family for member in params.members}


def test_long_horizon_samples_reach_two_hundred_and_fifty_turns() -> None:
    params = zoo_family(WIDE).draw(random.Random(3))
    long = replace(
        params,
        tail_share=0.3,
        tail_min_turns=200,
        tail_span=2.5,
        max_context_tokens=131072,
        output_median_tokens=50,
        first_turn_factor=1.0,
        long_step_share=0.0,
        observation_median_tokens=10,
        max_observation_tokens=1024,
    )
    trace = zoo_family(WIDE).generate(long, 200, seed=3)
    turns = [len(t.steps) for t in trace]
    assert max(turns) > 200 and max(turns) <= MOST_TURNS


def _shape(burst: float) -> AgentWorkload:
    return AgentWorkload(
        name="b",
        group_size=4,
        prompt_tokens=LogNormal(100, 0.1),
        turns=LogNormal(40, 0.01),
        min_turns=40,
        max_turns=40,
        output_tokens=LogNormal(20, 0.1),
        max_output_tokens_per_turn=100,
        max_response_tokens=100_000,
        observation_tokens=LogNormal(10, 0.1),
        max_observation_tokens=100,
        tools=(
            ToolModel("quick", 0.8, LogNormal(0.1, 0.01), 10),
            ToolModel("tests", 0.2, LogNormal(100, 0.01), 1000),
        ),
        max_context_tokens=100_000,
        tool_burst=burst,
    )


def _slow_calls(burst: float) -> tuple[float, float]:
    """The share of test runs and the mean length of their runs."""
    runs: list[int] = []
    slow = total = 0
    for trajectory in sample_shape(_shape(burst), 400, seed=1):
        calls = [step.tool_s > 10 for step in trajectory.steps[:-1]]
        slow, total = slow + sum(calls), total + len(calls)
        length = 0
        for is_slow in [*calls, False]:
            if is_slow:
                length += 1
            elif length:
                runs.append(length)
                length = 0
    return slow / total, float(np.mean(runs))


def test_bursts_make_runs_of_test_calls_and_keep_their_share() -> None:
    share_iid, run_iid = _slow_calls(0.0)
    share_burst, run_burst = _slow_calls(0.8)
    assert share_iid == pytest.approx(0.2, abs=0.02)
    assert share_burst == pytest.approx(0.2, abs=0.04)
    assert run_iid == pytest.approx(1.25, abs=0.1)  # geometric: 1 / (1 - 0.2)
    assert run_burst > 3 * run_iid  # 1 / (1 - 0.8 - 0.2 * 0.2) ~ 6.25


def test_a_burst_probability_must_be_below_one() -> None:
    with pytest.raises(ValueError, match="tool_burst"):
        _shape(1.0)
