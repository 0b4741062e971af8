"""Resource manager: configuration pricing, baselines, exhaustive search and annealing."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.cost.model import preset
from heddle.policy.resources.annealing import (
    AnnealingConfig,
    anneal,
    neighbour,
    plan_resources,
    random_configuration,
)
from heddle.policy.resources.problem import (
    ResourceProblem,
    TpInterference,
    all_configurations,
    exhaustive_search,
    fixed_configuration,
)

from .strategies import brute_force_heterogeneous


def long_tail(num: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [min(32768.0, rng.lognormvariate(math.log(6000), 0.7)) for _ in range(num)]


def problem(lengths: list[float], num_gpus: int, model: str = "qwen3-32b") -> ResourceProblem:
    cost_models = {tp: preset(model, "h100", tp) for tp in (1, 2, 4, 8)}
    return ResourceProblem(lengths, num_gpus, cost_models, context_tokens=4000)


def test_interference_queues_past_the_kv_cap() -> None:
    model = preset("qwen3-8b", "h100", 1)
    interference = TpInterference(model, context_tokens=8000)
    cap = interference.max_batch
    assert cap == model.max_kv_tokens // 8000
    assert interference(1) == pytest.approx(1.0)
    assert interference(2 * cap) == pytest.approx(2 * interference(cap))
    factors = [interference(b) for b in range(1, 3 * cap)]
    assert all(a <= b for a, b in itertools.pairwise(factors))


def test_configuration_makespan_equals_brute_force_placement() -> None:
    lengths = [9000.0, 3000.0, 2500.0, 800.0, 400.0]
    prob = problem(lengths, 4)
    for key in all_configurations(prob):
        workers = [
            (prob.per_token_s(tp), TpInterference(preset("qwen3-32b", "h100", tp), 4000))
            for tp in key
        ]
        assert prob.makespan_s(key, exact=True) == brute_force_heterogeneous(lengths, workers)


def test_configurations_are_maximal_multisets() -> None:
    prob = problem(long_tail(20, 0), 4)
    assert sorted(all_configurations(prob)) == sorted([(4,), (2, 2), (2, 1, 1), (1, 1, 1, 1)])
    big = problem(long_tail(20, 0), 16)
    for key in all_configurations(big):
        assert sum(key) == 16 and list(key) == sorted(key, reverse=True)


def test_fixed_baselines_fall_back_to_the_largest_fitting_degree() -> None:
    prob = problem(long_tail(30, 1), 4)
    assert fixed_configuration(prob, 1) == (1, 1, 1, 1)
    assert fixed_configuration(prob, 8) == (4,)
    assert fixed_configuration(problem(long_tail(30, 1), 24), 8) == (8, 8, 8)


def test_plan_covers_every_trajectory_with_workers_by_tp_descending() -> None:
    lengths = long_tail(300, 2)
    prob = problem(lengths, 16)
    plan = prob.plan((8, 4, 2, 1, 1))
    assert plan.tp_degrees == [8, 4, 2, 1, 1] and plan.num_gpus == 16
    assert sorted(i for group in plan.groups for i in group) == list(range(len(lengths)))
    assert plan.makespan_s == prob.makespan_s((1, 2, 1, 4, 8), exact=True)
    recomputed = max(
        (prob.per_token_s(tp) * TpInterference(preset("qwen3-32b", "h100", tp), 4000)(len(g)))
        * max(lengths[i] for i in g)
        for tp, g in zip(plan.tp_degrees, plan.groups, strict=True)
        if g
    )
    assert recomputed == plan.makespan_s


@pytest.mark.parametrize(("num_gpus", "seed"), [(8, 0), (8, 1), (16, 2), (16, 3)])
def test_annealing_is_near_exhaustive_and_never_worse_than_fixed(num_gpus: int, seed: int) -> None:
    prob = problem(long_tail(400, seed), num_gpus)
    best = exhaustive_search(prob)
    result = anneal(prob, random.Random(seed))
    fix1 = prob.makespan_s(fixed_configuration(prob, 1), exact=True)
    fix8 = prob.makespan_s(fixed_configuration(prob, 8), exact=True)
    assert result.plan.makespan_s <= min(fix1, fix8)
    assert result.plan.makespan_s <= 1.03 * best.makespan_s
    assert result.plan.makespan_s >= best.makespan_s


def test_annealing_is_reproducible_with_a_seed() -> None:
    prob = problem(long_tail(300, 5), 32)
    first = anneal(prob, random.Random(42))
    again = anneal(problem(long_tail(300, 5), 32), random.Random(42))
    assert first == again


@settings(max_examples=100)
@given(num_gpus=st.integers(1, 40), seed=st.integers(0, 1000))
def test_moves_keep_the_gpu_budget_and_allowed_degrees(num_gpus: int, seed: int) -> None:
    prob = problem([100.0, 50.0], num_gpus, model="qwen3-8b")
    rng = random.Random(seed)
    state = random_configuration(prob, rng)
    for _ in range(20):
        assert sum(state) == num_gpus
        assert set(state) <= set(prob.tp_degrees)
        assert list(state) == sorted(state, reverse=True)
        state = neighbour(prob, state, rng)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="num_gpus"):
        problem([1.0], 0)
    with pytest.raises(ValueError, match="context_tokens"):
        ResourceProblem([1.0], 2, {1: preset("qwen3-8b")}, context_tokens=-1)
    with pytest.raises(ValueError, match="no TP degree"):
        ResourceProblem([1.0], 1, {1: preset("qwen3-32b", "h100")}, context_tokens=10**6)
    prob = problem([1.0, 2.0], 4)
    with pytest.raises(ValueError, match="needs 8"):
        prob.makespan_s((4, 4))
    with pytest.raises(ValueError, match="not allowed"):
        prob.makespan_s((3,))
    with pytest.raises(ValueError, match="cooling"):
        AnnealingConfig(cooling=1.5)


def test_plan_resources_in_one_call() -> None:
    lengths = long_tail(200, 9)
    cost_models = {tp: preset("qwen3-14b", "h100", tp) for tp in (1, 2, 4, 8)}
    plan = plan_resources(lengths, 8, cost_models, 4000, random.Random(0))
    assert plan.num_gpus <= 8
    assert sorted(i for group in plan.groups for i in group) == list(range(200))
