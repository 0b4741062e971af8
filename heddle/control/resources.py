"""The resource plan at rollout start: which TP degrees a GPU budget is split into.

* ``annealed`` (Heddle, paper s.6; the name is kept for the bundles): the exact optimum of the
  placement objective over every configuration of each subset of TP degrees
  (``heddle.policy.resources.budget_search``; it replaces the paper's simulated annealing, which it
  never does worse than), the candidates rated by the plan estimate of
  ``heddle.policy.resources.plan_estimate`` (per-group KV pressure, tool time, interference) on the
  first predictions; the lowest estimate wins, so the plan is never rated worse than any homogeneous
  plan.
* ``homogeneous``: every worker the same TP degree (the baselines, Fix-1, Fix-8). Degree 0 means
  "the best homogeneous degree for this workload" by the same objective, so a baseline is never
  handed a degree that hurts it.

For a fixed live pool there is no choice to make: the placement decider maps the presorted
groups onto the workers that registered (``partition_heterogeneous`` over their TP degrees).

How lengths become seconds follows ``heddle.policy.resources.problem``: per-token time and
interference of each degree at one representative context per sequence, here the KV a trajectory
holds on average over its life: the mean prompt plus half of the mean predicted output and of the
observations that come with it. Agentic trajectories keep their KV through tool gaps, so this
footprint, not the context of a decoding step alone, sets how many fit in a worker's KV.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from heddle.policy.cost.model import TP_DEGREES, CostModel
from heddle.policy.placement.presorted import WorkerModel
from heddle.policy.resources.plan_choice import candidate_plans, choose_plan
from heddle.policy.resources.plan_estimate import AgentShape
from heddle.policy.resources.problem import ResourceProblem, TpInterference, fixed_configuration
from heddle.traces import TraceTrajectory

ResourceMode = Literal["annealed", "homogeneous"]
DEFAULT_OBSERVATION_RATIO = 1.0
"""Observation tokens per output token before any history (assumption: agents read about as
much as they write; docs/calibration.md s.2 has ~500-token observations after ~500-token turns)."""


def representative_context(
    prompt_tokens: Sequence[int], predicted: Sequence[float], observation_ratio: float = 1.0
) -> int:
    """The KV a sequence holds on average over its life (tokens, >= 1): its prompt plus half
    of what it will add, its predicted output and the observations that come with it
    (``observation_ratio`` observation tokens per output token, learned from history)."""
    if not prompt_tokens:
        return 1
    if observation_ratio < 0:
        raise ValueError(f"observation_ratio must be >= 0, got {observation_ratio}")
    mean_prompt = sum(prompt_tokens) / len(prompt_tokens)
    mean_output = sum(predicted) / len(predicted) if predicted else 0.0
    return max(1, round(mean_prompt + (1 + observation_ratio) * mean_output / 2))


def observation_ratio(
    history: Sequence[tuple[int, int]], default: float = DEFAULT_OBSERVATION_RATIO
) -> float:
    """Observation tokens per output token over completed trajectories ``(output tokens,
    observation tokens)``; ``default`` without history."""
    outputs = sum(output for output, _ in history)
    return sum(observation for _, observation in history) / outputs if outputs else default


@dataclass(frozen=True, slots=True)
class AgenticCostModel:
    """A worker's cost model as the planners see an agentic trajectory on it: besides decoding,
    each output token comes with ``tool_s_per_token`` seconds in tools, during which the
    trajectory keeps its KV resident. So a trajectory alone takes ``T + r`` per token; among
    ``b`` residents only ``d`` decode at once, ``d = b T F(d) / (T F(d) + r)``, so one takes
    ``T F(d) + r``; past the KV capacity (``TpInterference``) the group drains in waves at that
    wall-clock pace, not at the bare decode pace. With ``r = 0`` this is
    the wrapped model (the paper's token-only objective). Only the planners use it; the
    simulator and the lower bound use the bare model."""

    inner: CostModel
    tool_s_per_token: float = 0.0

    @property
    def tp_degree(self) -> int:
        return self.inner.tp_degree

    @property
    def max_kv_tokens(self) -> int:
        return self.inner.max_kv_tokens

    def decode_step_s(self, batch_size: int, total_context_tokens: int) -> float:
        return self.inner.decode_step_s(batch_size, total_context_tokens)

    def prefill_s(self, num_tokens: int, num_cached_tokens: int = 0) -> float:
        return self.inner.prefill_s(num_tokens, num_cached_tokens)

    def solo_token_s(self, context_tokens: int = 0) -> float:
        return self.inner.solo_token_s(context_tokens) + self.tool_s_per_token

    def interference(self, batch_size: int, mean_context_tokens: int = 0) -> float:
        # Of ``batch_size`` resident trajectories only the share not in a tool decodes: a
        # token takes T F(d) decoding and r in tools, so d = b T F(d) / (T F(d) + r); two
        # fixed-point rounds from F = 1 settle it closely enough.
        solo = self.inner.solo_token_s(mean_context_tokens)
        rate = self.tool_s_per_token
        batched = solo
        for _ in range(2):
            decoding = max(1, round(batch_size * batched / (batched + rate)))
            batched = solo * self.inner.interference(decoding, mean_context_tokens)
        return (batched + rate) / (solo + rate)


def worker_model(cost: CostModel, context_tokens: int) -> WorkerModel:
    """A worker as the placement solver sees it (value objects, so equal degrees form a type)."""
    interference = TpInterference(cost, context_tokens)
    return WorkerModel(cost.solo_token_s(context_tokens), interference, f"tp{cost.tp_degree}")


def tool_s_per_token(history: Sequence[tuple[int, float]]) -> float:
    """Tool seconds per output token over completed trajectories ``(output tokens, tool
    seconds)``; 0 without history (the paper's token-only objective)."""
    outputs = sum(output for output, _ in history)
    return sum(seconds for _, seconds in history) / outputs if outputs else 0.0


def mean_tool_call_s(history: Sequence[tuple[int, float]]) -> float:
    """Mean seconds of one tool call over completed trajectories ``(tool calls, tool
    seconds)``; 0 without history."""
    calls = sum(count for count, _ in history)
    return sum(seconds for _, seconds in history) / calls if calls else 0.0


@dataclass(frozen=True, slots=True)
class HistoryRates:
    """What the planners and admission learn from earlier rollouts' completed trajectories."""

    observation_ratio: float = DEFAULT_OBSERVATION_RATIO
    tool_s_per_token: float = 0.0
    tool_call_s: float = 0.0

    @classmethod
    def of(cls, history: Sequence[TraceTrajectory]) -> HistoryRates:
        # The last step's tool output is never read: it is no observation.
        observed = [
            (t.num_output_tokens, sum(s.tool_output_tokens for s in t.steps[:-1])) for t in history
        ]
        return cls(
            observation_ratio(observed),
            tool_s_per_token([(t.num_output_tokens, t.tool_s) for t in history]),
            mean_tool_call_s([(len(t.steps) - 1, t.tool_s) for t in history]),
        )


def plan_tp_degrees(
    mode: ResourceMode,
    *,
    num_gpus: int,
    lengths: Sequence[float],
    context_tokens: int,
    cost_for_tp: Callable[[int], CostModel],
    rng: random.Random | None = None,
    tp_degree: int = 0,
    tool_s_per_token: float = 0.0,
    prompt_tokens: Sequence[int] | None = None,
    shape: AgentShape | None = None,
) -> list[int]:
    """TP degree per worker, largest first (``ValueError`` when no degree fits the budget).
    ``tool_s_per_token`` > 0 prices the search objective with ``AgenticCostModel``;
    ``prompt_tokens`` (per trajectory; default ``context_tokens`` each) and ``shape`` (default:
    the default observation ratio and turns, ``tool_s_per_token``) feed the plan estimate. The
    search is deterministic: ``rng`` is accepted for callers of the annealer and unused."""
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    if tp_degree:  # with fewer GPUs than the degree, the largest degree that fits
        bare = {tp: cost_for_tp(tp) for tp in TP_DEGREES}
        return list(fixed_configuration(ResourceProblem(lengths, num_gpus, bare, 0), tp_degree))
    models: Mapping[int, CostModel] = {
        tp: AgenticCostModel(cost_for_tp(tp), tool_s_per_token) for tp in TP_DEGREES
    }
    problem = ResourceProblem(lengths, num_gpus, models, context_tokens)
    prompts = [context_tokens] * len(lengths) if prompt_tokens is None else list(prompt_tokens)
    shape = shape or AgentShape(DEFAULT_OBSERVATION_RATIO, tool_s_per_token)
    # Homogeneous degree 0: the best homogeneous degree for this workload by the estimate.
    candidates = candidate_plans(problem, prompts, cost_for_tp, shape, mixes=mode == "annealed")
    return list(choose_plan(candidates).plan.tp_degrees)
