"""The figures of `heddle bench annealing` (``heddle.cli.bench_policy``): resource planning time
per GPU budget, the search's optimum against the paper's annealer and the exhaustive search, and
(``--validate``) the plan estimate against simulated makespans
(``heddle.experiments.plan_validation``).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from heddle.control.resources import AgenticCostModel, representative_context
from heddle.experiments.plan_validation import learnt_shape, validate
from heddle.policy.cost.model import TP_DEGREES, CostModel
from heddle.policy.resources.annealing import anneal
from heddle.policy.resources.plan_choice import candidate_plans, choose_plan
from heddle.policy.resources.plan_estimate import AgentShape
from heddle.policy.resources.problem import ResourceProblem, exhaustive_search
from heddle.sim.config import SimConfig
from heddle.traces import TraceTrajectory

VALIDATION_WORKLOADS = ("coding", "math", "search", "swe-like")
VALIDATION_GPUS = (8, 16)


class PlanningInputs:
    """What the planner sees for one trace: lengths (the true output tokens, so the figures are
    reproducible from the flags), prompts, the shape learnt from a history rollout, cost models."""

    def __init__(
        self,
        trace: Sequence[TraceTrajectory],
        history: Sequence[TraceTrajectory],
        cost_for_tp: Callable[[int], CostModel],
    ) -> None:
        self.lengths = [float(t.num_output_tokens) for t in trace]
        self.prompts = [t.prompt_tokens for t in trace]
        self.shape: AgentShape = learnt_shape(history)
        self.context = representative_context(
            self.prompts, self.lengths, self.shape.observation_ratio
        )
        self.cost_for_tp = cost_for_tp
        self.models: dict[int, CostModel] = {
            tp: AgenticCostModel(cost_for_tp(tp), self.shape.tool_s_per_token) for tp in TP_DEGREES
        }

    def problem(self, num_gpus: int) -> ResourceProblem:
        """A fresh problem: no memoised tables or prices flatter a timing."""
        return ResourceProblem(self.lengths, num_gpus, self.models, self.context)


def budget_report(
    inputs: PlanningInputs, num_gpus: int, seed: int, with_annealer: bool, with_exhaustive: bool
) -> dict[str, Any]:
    """Planning time and plan at one budget (milliseconds, seconds of makespan)."""
    start = time.perf_counter()
    candidates = candidate_plans(
        inputs.problem(num_gpus), inputs.prompts, inputs.cost_for_tp, inputs.shape
    )
    chosen = choose_plan(candidates)
    plan_ms = (time.perf_counter() - start) * 1000
    problem = inputs.problem(num_gpus)
    start = time.perf_counter()
    optimum = problem.best_cover()
    search_ms = (time.perf_counter() - start) * 1000
    assert optimum is not None  # candidate_plans found one
    homogeneous = [c for c in candidates if len(c.degrees) == 1]
    best_fix = min(homogeneous, key=lambda c: c.estimate_s)
    report: dict[str, Any] = {
        "gpus": num_gpus,
        "plan_ms": round(plan_ms, 1),
        "search_ms": round(search_ms, 1),
        "num_candidates": len(candidates),
        "tp_degrees": dict(sorted(Counter(chosen.plan.tp_degrees).items(), reverse=True)),
        "estimate_s": round(chosen.estimate_s, 1),
        "best_homogeneous": best_fix.plan.tp_degrees[0],
        "best_homogeneous_estimate_s": round(best_fix.estimate_s, 1),
        "search_objective_s": round(optimum.makespan, 3),
    }
    if with_annealer:
        fresh = inputs.problem(num_gpus)
        start = time.perf_counter()
        annealed = anneal(fresh, random.Random(seed))
        report["annealer_ms"] = round((time.perf_counter() - start) * 1000, 1)
        report["annealer_objective_s"] = round(annealed.plan.makespan_s, 3)
        report["search_over_annealer"] = round(optimum.makespan / annealed.plan.makespan_s, 4)
    if with_exhaustive:
        best = exhaustive_search(inputs.problem(num_gpus))
        report["exhaustive_objective_s"] = round(best.makespan_s, 3)
        report["search_equals_exhaustive"] = optimum.makespan == best.makespan_s
    return report


def validation_report(model: str, hardware: str, num_trajectories: int, seed: int) -> list[Any]:
    """Estimate vs simulated makespan of every candidate plan, per workload and budget."""
    return [
        validate(
            workload,
            num_trajectories,
            SimConfig(model=model, hardware=hardware, num_gpus=gpus, seed=seed),
            seed,
        ).summary()
        for workload in VALIDATION_WORKLOADS
        for gpus in VALIDATION_GPUS
    ]
