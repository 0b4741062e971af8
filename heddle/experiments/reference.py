"""The best-known reference of a workload (``heddle sim compare --reference``, ``heddle sim sweep
--reference``): Heddle with the oracle predictor on every TP plan the cluster allows, each
simulated on the rollout itself, and the fastest of them.

No one can deploy it: it knows every trajectory's lengths before it runs and picks its plan on
the very rollout it reports. So it is reported apart and never as a system (it is not in the
registry and never a baseline). Heddle (online) over it is what prediction and plan choice cost
Heddle; it over the lower bound is what scheduling leaves, with the bound's own slack; the two
multiply to Heddle's makespan over the lower bound.

Plans: every multiset of TP degrees that sums to the cluster's GPUs, from the degrees whose
worker holds the longest trajectory's final context (``every_plan``: 10 plans on 8 GPUs, 35 on
16, 165 on 32). Where they are more than ``MAX_EXHAUSTIVE_PLANS``, the planner's candidates on
the true lengths (the best cover of every subset of degrees,
``heddle.policy.resources.plan_choice``) and every homogeneous plan stand in: a best-known, not
an exhaustive, plan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from heddle.control.resources import AgenticCostModel, representative_context
from heddle.experiments.plan_validation import learnt_shape
from heddle.policy.cost.model import TP_DEGREES
from heddle.policy.resources.plan_choice import candidate_plans
from heddle.policy.resources.problem import ResourceProblem
from heddle.sim.config import SimConfig
from heddle.sim.run import simulate
from heddle.traces import TraceTrajectory

MAX_EXHAUSTIVE_PLANS = 40
"""Above this many plans (more than 16 GPUs) the planner's candidates stand in."""
REFERENCE_SYSTEM = "heddle"
REFERENCE_PREDICTOR = "oracle"


@dataclass(frozen=True, slots=True)
class Reference:
    makespan_s: float
    tp_degrees: list[int]
    num_plans: int
    """Plans simulated."""
    is_exhaustive: bool
    """Every plan the cluster allows (else the planner's candidates and homogeneous plans)."""
    wall_s: float


def every_plan(num_gpus: int, degrees: Sequence[int]) -> list[tuple[int, ...]]:
    """Every multiset of ``degrees`` summing to ``num_gpus``, each largest degree first."""
    ordered = sorted(set(degrees), reverse=True)

    def plans_from(remaining: int, start: int) -> list[tuple[int, ...]]:
        if remaining == 0:
            return [()]
        found: list[tuple[int, ...]] = []
        for position in range(start, len(ordered)):
            degree = ordered[position]
            if degree <= remaining:
                found += [(degree, *rest) for rest in plans_from(remaining - degree, position)]
        return found

    return plans_from(num_gpus, 0)


def reference_plans(
    trace: Sequence[TraceTrajectory], history: Sequence[TraceTrajectory], config: SimConfig
) -> tuple[list[tuple[int, ...]], bool]:
    """The plans the reference simulates and whether they are every plan the cluster allows."""
    longest = max(t.num_context_tokens for t in trace)
    allowed = [tp for tp in TP_DEGREES if tp <= config.num_gpus]
    fitting = [tp for tp in allowed if config.cost_for_tp(tp).max_kv_tokens >= longest]
    degrees = fitting or [max(allowed)]
    plans = every_plan(config.num_gpus, degrees)
    if len(plans) <= MAX_EXHAUSTIVE_PLANS:
        return plans, True
    homogeneous = [(tp,) * (config.num_gpus // tp) for tp in degrees]
    candidates = _planner_candidates(trace, history, config, degrees)
    return list(dict.fromkeys([*candidates, *homogeneous])), False


def best_known(
    trace: Sequence[TraceTrajectory], history: Sequence[TraceTrajectory], config: SimConfig
) -> Reference:
    """The reference of ``trace`` on ``config``'s cluster (see the module docstring)."""
    start = time.perf_counter()
    oracle = replace(config, predictor=REFERENCE_PREDICTOR)
    plans, is_exhaustive = reference_plans(trace, history, config)
    best: tuple[float, tuple[int, ...]] | None = None
    for plan in plans:
        result = simulate(trace, REFERENCE_SYSTEM, oracle, history=history, tp_degrees=plan)
        if best is None or result.makespan_s < best[0]:
            best = (result.makespan_s, plan)
    assert best is not None  # a cluster always allows a plan
    wall_s = time.perf_counter() - start
    return Reference(best[0], list(best[1]), len(plans), is_exhaustive, wall_s)


def _planner_candidates(
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
    config: SimConfig,
    degrees: Sequence[int],
) -> list[tuple[int, ...]]:
    """The best cover of every subset of ``degrees`` on the true lengths."""
    shape = learnt_shape(history or trace)
    lengths = [float(t.num_output_tokens) for t in trace]
    prompts = [t.prompt_tokens for t in trace]
    context = representative_context(prompts, lengths, shape.observation_ratio)
    models = {
        tp: AgenticCostModel(config.cost_for_tp(tp), shape.tool_s_per_token) for tp in degrees
    }
    problem = ResourceProblem(lengths, config.num_gpus, models, context)
    return [
        tuple(sorted(c.plan.tp_degrees, reverse=True))
        for c in candidate_plans(problem, prompts, config.cost_for_tp, shape)
    ]
