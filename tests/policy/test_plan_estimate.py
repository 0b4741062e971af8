"""The plan estimate (``heddle.policy.resources.plan_estimate``) and the choice among candidate
plans."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.control.resources import AgenticCostModel, plan_tp_degrees
from heddle.experiments.kv_pressure import ScaledKvCostModel
from heddle.policy.cost.model import AnalyticCostModel, preset
from heddle.policy.resources.plan_choice import candidate_plans, choose_plan
from heddle.policy.resources.plan_estimate import AgentShape, plan_makespan_s, worker_makespan_s
from heddle.policy.resources.problem import ResourceProblem, fixed_configuration

COST = preset("qwen3-32b", "h200", 2)


def scaled_kv(inner: AnalyticCostModel, factor: float) -> ScaledKvCostModel:
    """``inner`` with ``factor`` times its KV capacity (the sweep's KV-pressure model)."""
    return ScaledKvCostModel(inner.model, inner.hardware, inner.tp_degree, factor)


groups_st = st.lists(
    st.tuples(st.floats(1.0, 30000.0), st.integers(1, 8000)), min_size=1, max_size=40
)
shapes_st = st.builds(AgentShape, st.floats(0.0, 4.0), st.floats(0.0, 0.5))


def split(group: list[tuple[float, int]]) -> tuple[list[float], list[int]]:
    return [length for length, _ in group], [prompt for _, prompt in group]


def test_one_trajectory_alone_pays_its_prefill_decode_observations_and_tools() -> None:
    shape = AgentShape(observation_ratio=2.0, tool_s_per_token=0.05)
    length, prompt = 4000.0, 3000
    prefill = COST.prefill_s(8192) / 8192
    step = COST.decode_step_s(1, round(prompt + 3.0 * length / 2))
    expected = prefill * prompt + length * (step + 0.05 + 2.0 * prefill)
    assert worker_makespan_s([length], [prompt], COST, shape) == pytest.approx(expected)


def test_tool_time_is_overlapped_by_the_other_residents() -> None:
    shape = AgentShape(observation_ratio=0.0, tool_s_per_token=0.5)
    alone = worker_makespan_s([2000.0], [1000], COST, shape)
    eight = worker_makespan_s([2000.0] * 8, [1000] * 8, COST, shape)
    assert eight < 1.1 * alone  # the worker decodes others while one is in a tool


def test_a_worker_that_holds_one_context_serialises_its_group() -> None:
    shape = AgentShape(observation_ratio=0.0)
    context = 1000 + 2000 // 2
    tight = scaled_kv(COST, context * 1.5 / COST.max_kv_tokens)  # room for one at a time
    alone = worker_makespan_s([2000.0], [1000], tight, shape)
    eight = worker_makespan_s([2000.0] * 8, [1000] * 8, tight, shape)
    roomy = worker_makespan_s([2000.0] * 8, [1000] * 8, COST, shape)
    assert eight > 7 * alone
    assert roomy < 2 * alone


@settings(max_examples=200)
@given(group=groups_st, extra=st.tuples(st.floats(1.0, 30000.0), st.integers(1, 8000)))
def test_adding_a_trajectory_never_estimates_faster(
    group: list[tuple[float, int]], extra: tuple[float, int]
) -> None:
    # Within 0.1%: a short-prompt newcomer lowers the mean context a decode step reads, a
    # rounding-sized effect of averaging contexts (the longest prompt still pays its own).
    shape = AgentShape(1.0, 0.02)
    lengths, prompts = split(group)
    before = worker_makespan_s(lengths, prompts, COST, shape)
    after = worker_makespan_s([*lengths, extra[0]], [*prompts, extra[1]], COST, shape)
    assert after >= before * (1 - 1e-3)


@settings(max_examples=100)
@given(group=groups_st, shape=shapes_st, factor=st.floats(1.0, 8.0))
def test_more_kv_never_estimates_slower(
    group: list[tuple[float, int]], shape: AgentShape, factor: float
) -> None:
    lengths, prompts = split(group)
    small = scaled_kv(COST, 0.05)
    large = scaled_kv(COST, 0.05 * factor)
    # Up to float noise: the fixed point is approached in a few rounds from either cap.
    assert worker_makespan_s(lengths, prompts, large, shape) <= worker_makespan_s(
        lengths, prompts, small, shape
    ) * (1 + 1e-6)


@settings(max_examples=100)
@given(group=groups_st, ratio=st.floats(0.0, 4.0), tools=st.floats(0.0, 0.5), more=st.floats(0, 1))
def test_more_tool_time_never_estimates_faster(
    group: list[tuple[float, int]], ratio: float, tools: float, more: float
) -> None:
    lengths, prompts = split(group)
    less = worker_makespan_s(lengths, prompts, COST, AgentShape(ratio, tools))
    longer = worker_makespan_s(lengths, prompts, COST, AgentShape(ratio, tools + more))
    assert longer >= less * (1 - 1e-9)


def test_plan_estimate_is_the_slowest_worker_and_ignores_idle_ones() -> None:
    shape = AgentShape()
    lengths, prompts = [9000.0, 500.0, 400.0], [1000, 1000, 1000]
    by_degree = {tp: preset("qwen3-32b", "h200", tp) for tp in (1, 2)}
    estimate = plan_makespan_s(
        [2, 1, 1], [[0], [1, 2], []], lengths, prompts, by_degree.__getitem__, shape
    )
    slowest = worker_makespan_s([9000.0], [1000], by_degree[2], shape)
    other = worker_makespan_s([500.0, 400.0], [1000, 1000], by_degree[1], shape)
    assert estimate == max(slowest, other)
    with pytest.raises(ValueError, match="workers"):
        plan_makespan_s([2], [[0], [1]], lengths, prompts, by_degree.__getitem__, shape)


def planning_problem(
    seed: int, num: int, num_gpus: int, tools: float
) -> tuple[ResourceProblem, list[int], AgentShape]:
    rng = random.Random(seed)
    lengths = [min(32768.0, rng.lognormvariate(math.log(6000), 0.9)) for _ in range(num)]
    prompts = [rng.randint(200, 6000) for _ in range(num)]
    shape = AgentShape(rng.uniform(0.0, 3.0), tools)
    models = {tp: AgenticCostModel(preset("qwen3-32b", "h200", tp), tools) for tp in (1, 2, 4, 8)}
    return ResourceProblem(lengths, num_gpus, models, 8000), prompts, shape


@settings(max_examples=30)
@given(
    seed=st.integers(0, 10**6),
    num=st.integers(1, 200),
    num_gpus=st.integers(1, 40),
    tools=st.floats(0.0, 0.3),
)
def test_the_chosen_plan_is_never_rated_worse_than_any_homogeneous_plan(
    seed: int, num: int, num_gpus: int, tools: float
) -> None:
    problem, prompts, shape = planning_problem(seed, num, num_gpus, tools)
    cost = {tp: preset("qwen3-32b", "h200", tp) for tp in (1, 2, 4, 8)}.__getitem__
    candidates = candidate_plans(problem, prompts, cost, shape)
    chosen = choose_plan(candidates)
    homogeneous = {tuple(c.plan.tp_degrees): c for c in candidates if len(c.degrees) == 1}
    # Every Fix-k is a candidate, on all the workers that fit the budget.
    assert set(homogeneous) == {fixed_configuration(problem, tp) for tp in problem.tp_degrees}
    for candidate in homogeneous.values():
        rated = plan_makespan_s(
            candidate.plan.tp_degrees, candidate.plan.groups, problem.lengths, prompts, cost, shape
        )
        assert chosen.estimate_s <= rated
    assert sum(chosen.plan.tp_degrees) <= num_gpus
    placed = sorted(i for group in chosen.plan.groups for i in group)
    assert placed == list(range(num))


def test_plan_tp_degrees_homogeneous_mode_returns_one_degree() -> None:
    problem, prompts, shape = planning_problem(1, 120, 16, 0.05)
    degrees = plan_tp_degrees(
        "homogeneous",
        num_gpus=16,
        lengths=problem.lengths,
        context_tokens=8000,
        cost_for_tp=lambda tp: preset("qwen3-32b", "h200", tp),
        prompt_tokens=prompts,
        shape=shape,
    )
    assert len(set(degrees)) == 1 and sum(degrees) == 16
    fixed = plan_tp_degrees(
        "homogeneous",
        num_gpus=12,
        lengths=problem.lengths,
        context_tokens=8000,
        cost_for_tp=lambda tp: preset("qwen3-32b", "h200", tp),
        tp_degree=8,
    )
    assert fixed == [8]


def test_bad_shapes() -> None:
    with pytest.raises(ValueError, match="tool_s_per_token"):
        AgentShape(tool_s_per_token=-1.0)
    with pytest.raises(ValueError, match="max_output_tokens"):
        AgentShape(max_output_tokens=0.0)
    with pytest.raises(ValueError, match="prompts"):
        worker_makespan_s([1.0], [], COST, AgentShape())
    with pytest.raises(ValueError, match="no candidate"):
        choose_plan([])
