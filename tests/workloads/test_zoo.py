"""The workload zoo: valid traces, statistics inside each family's documented ranges, determinism
by seed, GRPO group structure, and presets inside their families' ranges."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import fields

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.traces import TraceTrajectory, parse_trace_line
from heddle.workloads.agent_shape import AgentWorkload
from heddle.workloads.zoo import (
    LOST_TO_VERL,
    PRESET_RANGES,
    ZOO,
    MixParams,
    leaf_params_type,
    zoo_family,
)
from heddle.workloads.zoo_params import MathParams, SearchParams, SweParams, WebParams

seeds = st.integers(min_value=0, max_value=2**31 - 1)
SLOW = settings(max_examples=8)


def _turn_counts(trace: list[TraceTrajectory]) -> np.ndarray:
    return np.array([len(t.steps) for t in trace])


def _ended_by_cap(t: TraceTrajectory, shape: AgentWorkload) -> bool:
    """Whether a cap (response or context) may have ended ``t`` before its drawn turns."""
    near_context = t.num_context_tokens + shape.max_observation_tokens >= shape.max_context_tokens
    return t.num_output_tokens >= shape.max_response_tokens or near_context


def _check_caps(trace: list[TraceTrajectory], shape: AgentWorkload) -> None:
    timeouts = max(tool.max_time_s for tool in shape.tools)
    for t in trace:
        assert parse_trace_line(msgspec.json.encode(t)) == t
        assert len(t.steps) <= shape.most_turns
        assert len(t.steps) >= shape.min_turns or _ended_by_cap(t, shape)
        assert t.num_context_tokens <= shape.max_context_tokens
        assert t.num_output_tokens <= shape.max_response_tokens
        assert all(1 <= s.output_tokens <= shape.max_output_tokens_per_turn for s in t.steps)
        assert all(s.tool_output_tokens <= shape.max_observation_tokens for s in t.steps)
        assert all(0 <= s.tool_s <= timeouts for s in t.steps)
        last = t.steps[-1]
        assert last.tool_s == 0 and last.tool_output_tokens == 0


@pytest.mark.parametrize("name", sorted(ZOO))
@SLOW
@given(seed=seeds)
def test_every_family_draws_params_in_range_and_valid_traces(name: str, seed: int) -> None:
    family = zoo_family(name)
    params = family.draw(random.Random(seed))
    members = params.members if isinstance(params, MixParams) else ()
    leaves = [m.params for m in members] if isinstance(params, MixParams) else [params]
    for leaf in leaves:
        for item in fields(leaf):
            assert type(leaf).RANGES[item.name].contains(getattr(leaf, item.name)), item.name
    trace = family.generate(params, 48, seed)
    assert len(trace) == 48 and len({t.id for t in trace}) == 48
    if not members:
        assert not isinstance(params, MixParams)
        _check_caps(trace, params.to_shape(name))


@pytest.mark.parametrize("name", sorted(PRESET_RANGES))
def test_preset_ranges_lie_inside_their_family_ranges(name: str) -> None:
    base, ranges = PRESET_RANGES[name]
    cls = leaf_params_type(base)
    assert cls is not None and leaf_params_type(name) is cls
    for field_name, span in ranges.items():
        family_range = cls.RANGES[field_name]
        assert family_range.contains(span.low) and family_range.contains(span.high), field_name


def test_the_lost_to_verl_presets_are_registered() -> None:
    assert set(LOST_TO_VERL) == {"search-tail", "swe-long", "math-python"} <= set(ZOO)


@SLOW
@given(seed=seeds)
def test_mix_has_two_to_four_distinct_members_with_unit_weight(seed: int) -> None:
    params = zoo_family("mix").draw(random.Random(seed))
    assert isinstance(params, MixParams)
    names = [m.family for m in params.members]
    assert 2 <= len(names) <= 4 and len(set(names)) == len(names)
    assert sum(m.weight for m in params.members) == pytest.approx(1.0)
    trace = zoo_family("mix").generate(params, 200, seed)
    assert len(trace) == 200
    by_family = Counter(t.group.split("-p")[0] for t in trace)
    assert set(by_family) <= {f"mix.{name}" for name in names}


@pytest.mark.parametrize("name", ["swe", "search", "math", "web", "search-tail", "swe-long"])
@SLOW
@given(seed=seeds)
def test_groups_share_a_prompt_and_have_the_drawn_size(name: str, seed: int) -> None:
    family = zoo_family(name)
    params = family.draw(random.Random(seed))
    assert not isinstance(params, MixParams)
    trace = family.generate(params, 100, seed)
    sizes = Counter(t.group for t in trace)
    assert all(size == params.group_size for size in list(sizes.values())[:-1])
    for group in sizes:
        assert len({t.prompt_tokens for t in trace if t.group == group}) == 1


@pytest.mark.parametrize("name", sorted(ZOO))
def test_same_seed_same_trace_other_epoch_same_prompts(name: str) -> None:
    family = zoo_family(name)
    params = family.draw(random.Random(11))
    assert family.draw(random.Random(11)) == params
    trace = family.generate(params, 64, seed=5)
    assert family.generate(params, 64, seed=5) == trace
    assert family.generate(params, 40, seed=5) == trace[:40] or name == "mix"
    again = family.generate(params, 64, seed=5, epoch=1)
    assert [(t.id, t.group, t.prompt_tokens) for t in again] == [
        (t.id, t.group, t.prompt_tokens) for t in trace
    ]
    assert [t.steps for t in again] != [t.steps for t in trace]
    assert family.generate(params, 64, seed=6) != trace


@SLOW
@given(seed=seeds)
def test_search_tail_share_and_turn_ranges(seed: int) -> None:
    params = zoo_family("search").draw(random.Random(seed))
    assert isinstance(params, SearchParams)
    trace = zoo_family("search").generate(params, 2000, seed)
    turns = _turn_counts(trace)
    is_tail = turns >= SearchParams.TAIL_MIN_TURNS
    assert np.all((turns[~is_tail] >= 2) & (turns[~is_tail] <= 6))
    assert np.all(turns <= SearchParams.TAIL_MAX_TURNS)
    # The expected share is tail_share (1-5%); groups share a difficulty, hence the slack.
    assert params.tail_share / 4 <= is_tail.mean() <= 2 * params.tail_share + 0.01
    tool_times = [s.tool_s for t in trace for s in t.steps[:-1]]
    assert np.median(tool_times) < 2.0


def test_search_tail_preset_runs_about_three_percent_long() -> None:
    family = zoo_family("search-tail")
    shares = []
    for seed in range(4):
        params = family.draw(random.Random(seed))
        assert isinstance(params, SearchParams) and params.tail_share == 0.03
        shares.append((_turn_counts(family.generate(params, 2000, seed)) >= 40).mean())
    assert 0.02 <= float(np.mean(shares)) <= 0.04


@pytest.mark.parametrize("name", ["swe", "swe-long"])
@SLOW
@given(seed=seeds)
def test_swe_has_long_contexts_and_minute_long_tests(name: str, seed: int) -> None:
    params = zoo_family(name).draw(random.Random(seed))
    assert isinstance(params, SweParams)
    trace = zoo_family(name).generate(params, 200, seed)
    contexts = [t.num_context_tokens for t in trace]
    assert 10_000 <= np.median(contexts) <= params.max_context_tokens
    assert max(_turn_counts(trace)) <= params.max_turns <= 150
    tool_times = [s.tool_s for t in trace for s in t.steps[:-1]]
    assert max(tool_times) >= 60
    if name == "swe-long":
        assert params.max_turns == 150 and params.test_median_s >= 60


@SLOW
@given(seed=seeds)
def test_math_has_short_python_calls_and_long_reasoning_steps(seed: int) -> None:
    params = zoo_family("math").draw(random.Random(seed))
    assert isinstance(params, MathParams)
    trace = zoo_family("math").generate(params, 600, seed)
    tool_times = [s.tool_s for t in trace for s in t.steps[:-1]]
    assert np.median(tool_times) <= 2.0 and np.percentile(tool_times, 95) <= 10.0
    step_lengths = [s.output_tokens for t in trace for s in t.steps]
    assert max(step_lengths) >= 8000
    assert max(step_lengths) <= MathParams.MAX_OUTPUT_TOKENS_PER_TURN
    assert max(_turn_counts(trace)) <= MathParams.MAX_TURNS


@SLOW
@given(seed=seeds)
def test_web_observations_are_page_dumps(seed: int) -> None:
    params = zoo_family("web").draw(random.Random(seed))
    assert isinstance(params, WebParams)
    trace = zoo_family("web").generate(params, 100, seed)
    observations = [s.tool_output_tokens for t in trace for s in t.steps[:-1]]
    assert np.median(observations) >= 1500
    assert np.median(_turn_counts(trace)) <= params.max_turns


def test_unknown_family_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown zoo family 'poetry'; choose one of swe"):
        zoo_family("poetry")
