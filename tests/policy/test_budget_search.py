"""Exact search over every TP configuration (``heddle.policy.resources.budget_search``)."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.cost.model import preset
from heddle.policy.resources.annealing import anneal
from heddle.policy.resources.problem import ResourceProblem, exhaustive_search, fixed_configuration

MODELS = ("qwen3-8b", "qwen3-32b")


def problem(
    lengths: list[float], num_gpus: int, model: str = "qwen3-32b", context: int = 4000
) -> ResourceProblem:
    cost_models = {tp: preset(model, "h100", tp) for tp in (1, 2, 4, 8)}
    return ResourceProblem(lengths, num_gpus, cost_models, context_tokens=context)


lengths_st = st.lists(st.floats(0.0, 40000.0, allow_nan=False), min_size=1, max_size=14)
# Qwen3-32B at TP1 on H100 holds ~24k tokens of KV: contexts up to 20k make its cap bite.
contexts_st = st.integers(1, 20000)


@settings(max_examples=120)
@given(
    lengths=lengths_st,
    num_gpus=st.integers(1, 12),
    model=st.sampled_from(MODELS),
    context=contexts_st,
)
def test_search_equals_exhaustive_on_small_budgets(
    lengths: list[float], num_gpus: int, model: str, context: int
) -> None:
    prob = problem(lengths, num_gpus, model, context)
    cover = prob.best_cover()
    best = exhaustive_search(problem(lengths, num_gpus, model, context))
    assert cover is not None
    assert cover.makespan == best.makespan_s
    assert sum(cover.degrees) + cover.unused_gpus == num_gpus
    assert sum(cover.sizes) == len(lengths)


@settings(max_examples=25)
@given(
    seed=st.integers(0, 10**6),
    num=st.integers(20, 120),
    num_gpus=st.sampled_from([8, 16, 24, 32]),
)
def test_search_is_never_worse_than_the_annealer(seed: int, num: int, num_gpus: int) -> None:
    rng = random.Random(seed)
    lengths = [min(32768.0, rng.lognormvariate(math.log(6000), 0.8)) for _ in range(num)]
    cover = problem(lengths, num_gpus).best_cover()
    annealed = anneal(problem(lengths, num_gpus), random.Random(seed))
    assert cover is not None and cover.makespan <= annealed.plan.makespan_s


@settings(max_examples=40)
@given(lengths=lengths_st, num_gpus=st.integers(1, 40), context=contexts_st)
def test_more_gpus_never_plan_slower(lengths: list[float], num_gpus: int, context: int) -> None:
    smaller = problem(lengths, num_gpus, context=context).best_cover()
    larger = problem(lengths, num_gpus + 1, context=context).best_cover()
    assert smaller is not None and larger is not None
    assert larger.makespan <= smaller.makespan


@settings(max_examples=40)
@given(lengths=lengths_st, num_gpus=st.integers(1, 40), degree=st.sampled_from([1, 2, 4, 8]))
def test_a_single_degree_search_is_fix_k(lengths: list[float], num_gpus: int, degree: int) -> None:
    prob = problem(lengths, num_gpus)
    if degree not in prob.tp_degrees:
        return
    cover = prob.best_cover([degree])
    assert cover is not None
    plan = prob.plan_from_cover(cover, [degree])
    assert tuple(plan.tp_degrees) == fixed_configuration(prob, degree)
    assert cover.makespan == prob.makespan_s(fixed_configuration(prob, degree), exact=True)


def test_plan_from_cover_places_every_trajectory_once_largest_first() -> None:
    rng = random.Random(3)
    lengths = [rng.lognormvariate(math.log(5000), 1.0) for _ in range(500)]
    prob = problem(lengths, 64)
    cover = prob.best_cover()
    assert cover is not None
    plan = prob.plan_from_cover(cover)
    assert plan.tp_degrees == sorted(plan.tp_degrees, reverse=True)
    assert plan.num_gpus <= 64 and 64 - plan.num_gpus < min(prob.tp_degrees)
    assert sorted(i for group in plan.groups for i in group) == list(range(len(lengths)))
    assert plan.makespan_s == cover.makespan
