"""Choosing a TP plan: exact search per degree subset, then the plan estimate decides.

Candidates are the exact optimum of the search objective (``ResourceProblem.best_cover``) over
every non-empty subset of the allowed degrees: the homogeneous plans (one degree each), every
mix of two or three degrees, and the unrestricted optimum. The block objective finds the best
way to mix degrees under its representative context; ``heddle.policy.resources.plan_estimate`` then
rates each candidate's placement with per-group contexts, KV pressure, tool time and interference,
and the lowest estimate wins. Because every homogeneous plan is a candidate, the chosen plan is
never rated worse than the best homogeneous plan by the estimate it is chosen with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from heddle.policy.cost.model import CostModel
from heddle.policy.resources.plan_estimate import AgentShape, plan_makespan_s
from heddle.policy.resources.problem import ResourcePlan, ResourceProblem


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate plan: the degrees its search could use, the plan, and its estimate (s)."""

    degrees: tuple[int, ...]
    plan: ResourcePlan
    estimate_s: float


def candidate_plans(
    problem: ResourceProblem,
    prompts: Sequence[int],
    cost_for_tp: Callable[[int], CostModel],
    shape: AgentShape,
    *,
    mixes: bool = True,
) -> list[Candidate]:
    """The best cover of each degree subset that has a finite one, with its estimate; plans
    that repeat an earlier one are dropped. ``prompts`` are the trajectories' prompt tokens in
    the problem's input order; ``cost_for_tp`` the bare cost models the estimate runs.
    ``mixes=False``: the homogeneous plans only."""
    lengths = problem.lengths
    candidates: list[Candidate] = []
    seen: set[tuple[int, ...]] = set()
    degrees = problem.tp_degrees
    for size in range(1, len(degrees) + 1 if mixes else 2):
        for subset in combinations(degrees, size):
            cover = problem.best_cover(subset)
            if cover is None:
                continue
            plan = problem.plan_from_cover(cover, subset)
            key = tuple(plan.tp_degrees)
            if key in seen:
                continue
            seen.add(key)
            estimate = plan_makespan_s(
                plan.tp_degrees, plan.groups, lengths, prompts, cost_for_tp, shape
            )
            candidates.append(Candidate(subset, plan, estimate))
    return candidates


def choose_plan(candidates: Sequence[Candidate]) -> Candidate:
    """The lowest estimate; ties go to the plan found with fewer degrees (homogeneous first)."""
    if not candidates:
        raise ValueError("no candidate plan: no TP degree fits the trajectories")
    return min(candidates, key=lambda c: (c.estimate_s, len(c.degrees), c.plan.tp_degrees))
