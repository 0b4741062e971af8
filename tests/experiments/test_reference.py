"""The best-known reference: every plan the cluster allows, heddle with the oracle on each, the
fastest; reported apart from the systems."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from heddle.control.systems import SYSTEMS
from heddle.experiments.reference import best_known, every_plan, reference_plans
from heddle.sim import SimConfig, simulate
from heddle.workloads import generate


@given(st.integers(1, 20), st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1))
def test_every_plan_is_every_multiset_that_fills_the_cluster(
    num_gpus: int, degrees: set[int]
) -> None:
    brute = {
        tuple(sorted(combo, reverse=True))
        for size in range(1, num_gpus + 1)
        for combo in itertools.combinations_with_replacement(sorted(degrees), size)
        if sum(combo) == num_gpus
    }
    plans = every_plan(num_gpus, sorted(degrees))
    assert len(plans) == len(set(plans)) and set(plans) == brute


def test_the_reference_is_the_fastest_plan_of_heddle_with_the_oracle() -> None:
    trace = generate("coding", 16, seed=3)
    history = generate("coding", 16, seed=3, epoch=1)
    config = SimConfig(model="qwen3-8b", num_gpus=4)
    plans, is_exhaustive = reference_plans(trace, history, config)
    assert is_exhaustive and set(plans) == {(4,), (2, 2), (2, 1, 1), (1, 1, 1, 1)}
    oracle = replace(config, predictor="oracle")
    makespans = {
        plan: simulate(trace, "heddle", oracle, history=history, tp_degrees=plan).makespan_s
        for plan in plans
    }
    reference = best_known(trace, history, config)
    assert reference.makespan_s == min(makespans.values())
    assert makespans[tuple(reference.tp_degrees)] == reference.makespan_s
    assert reference.num_plans == 4 and "reference" not in SYSTEMS


def test_a_large_cluster_falls_back_to_the_planners_candidates() -> None:
    trace = generate("coding", 16, seed=3)
    config = SimConfig(model="qwen3-8b", num_gpus=32)
    plans, is_exhaustive = reference_plans(trace, trace, config)
    assert not is_exhaustive and len(plans) < len(every_plan(32, [1, 2, 4, 8]))
    assert {(tp,) * (32 // tp) for tp in (1, 2, 4, 8)} <= set(plans)
    assert all(sum(plan) <= 32 for plan in plans)
