"""The plan sweep: every candidate plan of a tiny cell estimated and simulated, heddle's own
pick checked against them, and the summary arithmetic on hand-made results."""

from __future__ import annotations

import json
import math

import pytest

from heddle.experiments.cells import Cell
from heddle.experiments.plan_validation import PlanRow, Validation
from heddle.experiments.sweep import SweepConfig
from heddle.experiments.sweep_plans import (
    CellPlans,
    plan_label,
    plan_markdown,
    plan_sweep_document,
    run_plan_sweep,
    summarise_plans,
)

TINY = SweepConfig(
    families=("swe",),
    models=("qwen3-8b",),
    gpu_counts=(4,),
    kv_ratios=(1.0,),
    num_cells=1,
    steps_per_cell=40,
    min_trajectories=8,
    max_trajectories=16,
    num_heldout_cells=0,
    with_corpus=False,
)


def test_a_tiny_plan_sweep_simulates_every_candidate_and_heddles_pick() -> None:
    (result,) = run_plan_sweep(TINY, jobs=1)
    rows = result.validation.rows
    plans = [tuple(r.tp_degrees) for r in rows]
    assert len(plans) == len(set(plans)) >= 2
    assert all(sum(r.tp_degrees) == 4 for r in rows)
    assert {(4,), (2, 2), (1, 1, 1, 1)} <= set(plans)  # every homogeneous plan is a candidate
    assert all(r.estimate_s > 0 and r.simulated_s > 0 for r in rows)
    assert result.validation.chosen in [r.tp_degrees for r in rows]
    assert sum(result.heddle_tp_degrees) == 4
    summary = result.summary()
    assert summary["heddle_over_best_candidate"] == pytest.approx(
        result.heddle_makespan_s / min(r.simulated_s for r in rows)
    )
    document = json.loads(json.dumps(plan_sweep_document(TINY, [result], 1.0), allow_nan=False))
    assert document["config"]["engine_model"] == "sglang"
    assert document["summary"]["num_plans"] == len(rows)
    assert "| swe |" in plan_markdown(TINY, [result])


def _cell_plans(
    index: int, rows: list[tuple[list[int], float, float]], heddle_s: float
) -> CellPlans:
    validation = Validation(
        "hand", 4, 8, [PlanRow(tps, est, sim) for tps, est, sim in rows], rows[0][0]
    )
    cell = Cell(index, "math", index, "qwen3-8b", 4, 1.0)
    return CellPlans(cell, validation, rows[0][0], heddle_s, 0.0)


def test_the_summary_matches_a_hand_computation() -> None:
    results = [
        # The estimate picks the mix; it simulates 10% worse than TP4 (the best homogeneous).
        _cell_plans(0, [([2, 1, 1], 50, 110), ([4], 80, 100), ([1, 1, 1, 1], 90, 200)], 110),
        _cell_plans(1, [([2, 2], 100, 100), ([4], 120, 120)], 100),
    ]
    summary = summarise_plans(results)
    assert summary.num_cells == 2 and summary.num_plans == 5
    assert summary.estimate_over_simulated["p50"] == pytest.approx(0.8)  # of .45 .8 .45 1 1
    picks = summary.estimate_pick_over_best_homogeneous
    assert picks is not None and picks.geomean == pytest.approx(math.sqrt(1.1 * (100 / 100)))
    assert (picks.worst, picks.worst_cell) == (pytest.approx(1.1), 0)
    assert summary.num_cells_heddle_behind_homogeneous == 1
    assert summary.median_rank_correlation == pytest.approx(0.5)  # cell 0 only: 3 plans


def test_plan_labels_count_workers_per_degree() -> None:
    assert plan_label([4, 4, 1, 1, 1]) == "2xTP4 3xTP1"
    assert plan_label([8]) == "1xTP8"
