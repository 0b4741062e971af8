"""The plan-estimate validation study on a tiny SWE-like rollout."""

from __future__ import annotations

import math

import pytest

from heddle.experiments.plan_validation import SWE_LIKE, learnt_shape, spearman, validate
from heddle.sim.config import SimConfig
from heddle.workloads import generate_from_spec


def test_spearman_ranks_with_ties() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)
    assert math.isnan(spearman([1, 2], [2, 1]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])


def test_swe_like_trajectories_have_long_tools_and_many_turns() -> None:
    trace = generate_from_spec(SWE_LIKE, 64, 0)
    assert max(len(t.steps) for t in trace) > 50  # the 16-64-turn datasets' tail, and beyond
    shape = learnt_shape(trace)
    assert shape.tool_s_per_token > 0.02  # minutes of tests over a few hundred tokens a turn
    assert shape.max_output_tokens == max(t.num_output_tokens for t in trace)


def test_validation_simulates_every_candidate_and_reports_the_chosen_one() -> None:
    study = validate("swe-like", 24, SimConfig(num_gpus=4))
    plans = [row.tp_degrees for row in study.rows]
    assert [4] in plans and [1, 1, 1, 1] in plans and study.chosen in plans
    assert all(row.estimate_s > 0 and row.simulated_s > 0 for row in study.rows)
    summary = study.summary()
    chosen_over_best = summary["chosen_over_best"]
    assert isinstance(chosen_over_best, float) and chosen_over_best >= 1.0
    assert len(summary["plans"]) == len(plans)  # type: ignore[arg-type]
