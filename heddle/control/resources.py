"""The resource plan at rollout start: which TP degrees a GPU budget is split into.

* ``annealed`` (Heddle, paper s.6): sort-initialised simulated annealing over TP configurations
  (``heddle.policy.annealing``), priced by the heterogeneous placement makespan of the first
  predictions; never worse than Fix-1 or Fix-8.
* ``homogeneous``: every worker the same TP degree (the baselines, Fix-1, Fix-8). Degree 0 means
  "the best homogeneous degree for this workload" by the same objective, so a baseline is never
  handed a degree that hurts it.

For a fixed live pool there is no choice to make: the placement decider maps the presorted
groups onto the workers that registered (``partition_heterogeneous`` over their TP degrees).

How lengths become seconds follows ``heddle.policy.resources``: per-token time and interference
of each degree at one representative context per sequence, here the mean prompt plus half the
mean predicted output (a sequence's average context while it decodes, ignoring observations).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from heddle.policy.annealing import anneal
from heddle.policy.cost_model import TP_DEGREES, CostModel
from heddle.policy.placement import WorkerModel
from heddle.policy.resources import ResourceProblem, TpInterference, fixed_configuration

ResourceMode = Literal["annealed", "homogeneous"]


def representative_context(prompt_tokens: Sequence[int], predicted: Sequence[float]) -> int:
    """Mean prompt plus half the mean predicted output (tokens, >= 1)."""
    if not prompt_tokens:
        return 1
    mean_prompt = sum(prompt_tokens) / len(prompt_tokens)
    mean_output = sum(predicted) / len(predicted) if predicted else 0.0
    return max(1, round(mean_prompt + mean_output / 2))


def worker_model(cost: CostModel, context_tokens: int) -> WorkerModel:
    """A worker as the placement solver sees it (value objects, so equal degrees form a type)."""
    interference = TpInterference(cost, context_tokens)
    return WorkerModel(cost.solo_token_s(context_tokens), interference, f"tp{cost.tp_degree}")


def plan_tp_degrees(
    mode: ResourceMode,
    *,
    num_gpus: int,
    lengths: Sequence[float],
    context_tokens: int,
    cost_for_tp: Callable[[int], CostModel],
    rng: random.Random,
    tp_degree: int = 0,
) -> list[int]:
    """TP degree per worker, largest first (``ValueError`` when no degree fits the budget)."""
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    models: Mapping[int, CostModel] = {tp: cost_for_tp(tp) for tp in TP_DEGREES}
    problem = ResourceProblem(lengths, num_gpus, models, context_tokens)
    if mode == "annealed":
        return list(anneal(problem, rng).plan.tp_degrees)
    if tp_degree:
        if tp_degree not in problem.tp_degrees:
            raise ValueError(
                f"TP{tp_degree} does not fit {num_gpus} GPUs for this model; "
                f"choose one of {problem.tp_degrees}"
            )
        return list(fixed_configuration(problem, tp_degree))
    configurations = {fixed_configuration(problem, tp) for tp in problem.tp_degrees}
    best = min(configurations, key=lambda key: (problem.makespan_s(key, exact=True), key))
    return list(best)
