"""A fast estimate of a resource plan's makespan over the predicted trajectories.

The search objective of ``heddle.policy.resources.problem`` prices a block of trajectories at one
representative context, so it cannot see what sinks some plans on long agentic workloads: a
worker's residents outgrowing its KV cache. This estimate runs each worker's group through a
fluid model of continuous batching (every trajectory of the group starts at 0 and all alive ones
advance together; they finish shortest first), phase by phase between finishes, and charges:

* **batch interference**: a decode step of ``d`` sequences of mean context ``c`` costs
  ``decode_step_s(d, d * c)`` (``heddle.policy.cost.model``), with contexts growing as the
  trajectories progress (``prompt + (1 + observation_ratio) * tokens so far``);
* **tool time**: ``tool_s_per_token`` seconds per output token that the trajectory spends in
  tools, during which the worker serves its other residents: only ``d = k s / R`` of ``k`` alive
  trajectories decode at once, where ``R`` is one trajectory's time per token;
* **KV capacity**: the batching model (``heddle.policy.batching.model``) admits a generation only
  if the running contexts fit, so at most ``max_kv_tokens / c`` decode at once and the rest of
  the alive trajectories wait their turn (the worker's throughput, not the batch, bounds them);
* **prefill**: prompts at the start and each turn's observation (``observation_ratio`` tokens per
  output token), a stall for the whole worker (prefill-first iterations).

Re-prefills of evicted contexts are left out: under Heddle's priority eviction the residents that
run keep their caches and the waiting ones are re-admitted about once, and charging a
re-prefill per turn in proportion to the overflow (``1 - KV / contexts``) overstated simulated
makespans 2-8x and lowered the rank correlation on every workload of the validation study.

Per phase one trajectory's time per token is ``R = max(s + r + p, k (s / d + p))``:
its own critical path (its decode step, its tool time and its prefills ``p`` per token) or the
worker's busy time per round of one token each (``k / d`` steps plus everyone's prefills).
``d``, the batch while decoding, is the share of the alive trajectories not in tools,
``d = k s(d) / (s(d) + r)``, capped by the KV room (a few rounds down from the cap).

It is a model, not a simulation: the validation study (``heddle.experiments.plan_validation``)
prints its ratio to simulated makespans. It is pure and cheap (``O(n)`` per plan), so the live
control plane and the simulator choose plans with it alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel

_FIXED_POINT_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class AgentShape:
    """What the planner knows of the trajectories besides their predicted lengths, learned from
    completed trajectories (``heddle.control.resources``)."""

    observation_ratio: float = 1.0
    """Observation tokens per output token."""
    tool_s_per_token: float = 0.0
    """Seconds in tools per output token."""
    max_output_tokens: float = math.inf
    """The longest output seen (the recipe's response cap): predictions are clipped to it, so
    one inflated first prediction does not stand for a trajectory that cannot exist."""

    def __post_init__(self) -> None:
        if not self.max_output_tokens > 0.0:
            raise ValueError(f"max_output_tokens must be > 0, got {self.max_output_tokens!r}")
        for name in ("observation_ratio", "tool_s_per_token"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


def worker_makespan_s(
    lengths: Sequence[float], prompts: Sequence[int], cost: CostModel, shape: AgentShape
) -> float:
    """The estimated seconds until a worker of ``cost`` finishes the trajectories of predicted
    output ``lengths`` and ``prompts`` (tokens), all started at 0; 0 for an empty group.
    Predictions whose context would outgrow the cache still get a finite estimate (one at a
    time): a prediction is not a length, and the engine caps what it generates."""
    if len(lengths) != len(prompts):
        raise ValueError(f"{len(lengths)} lengths but {len(prompts)} prompts")
    if not lengths:
        return 0.0
    growth = 1.0 + shape.observation_ratio
    prefill_per_token_s = _prefill_per_token_s(cost)
    lengths = [min(length, shape.max_output_tokens) for length in lengths]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    # The longest prompt still alive at each rank (suffix maxima of the finishing order).
    longest_prompt = [float(prompts[index]) for index in order]
    for rank in range(len(order) - 2, -1, -1):
        longest_prompt[rank] = max(longest_prompt[rank], longest_prompt[rank + 1])
    alive_prompts = float(sum(prompts))
    elapsed = prefill_per_token_s * alive_prompts  # the prompts' prefill batch
    done = 0.0  # tokens every alive trajectory has generated
    for rank, index in enumerate(order):
        alive = len(order) - rank
        span = lengths[index] - done
        if span > 0.0:
            grown = growth * (done + span / 2)
            contexts = (alive_prompts / alive + grown, longest_prompt[rank] + grown)
            per_token = _per_token_s(cost, shape, alive, contexts, prefill_per_token_s)
            elapsed += span * per_token
            done = lengths[index]
        alive_prompts -= prompts[index]
    return elapsed


def _per_token_s(
    cost: CostModel,
    shape: AgentShape,
    alive: int,
    contexts: tuple[float, float],
    prefill_s: float,
) -> float:
    """One alive trajectory's seconds per output token in a phase (module docstring), given the
    mean and the largest context of the alive ones: the critical path is the largest one's,
    whose steps read its own context beside ``d - 1`` average ones."""
    mean_context, max_context = contexts
    own_prefill = prefill_s * shape.observation_ratio  # its observations, per output token
    room = max(1.0, math.floor(cost.max_kv_tokens / max(mean_context, 1.0)))
    decoding = min(float(alive), room)
    # d = k s(d) / (s(d) + r) grows with d, so iterating from the cap descends monotonically
    # to its largest fixed point (no oscillation); prefill stalls pause every decoder alike.
    for _ in range(_FIXED_POINT_ROUNDS):
        step = _step_s(cost, decoding, mean_context)
        decoding = min(decoding, max(1.0, alive * step / (step + shape.tool_s_per_token)))
    step = _step_s(cost, decoding, mean_context)
    own_step = step + _step_s(cost, 1.0, max_context) - _step_s(cost, 1.0, mean_context)
    own = own_step + shape.tool_s_per_token + own_prefill
    busy = alive * (step / decoding + own_prefill)
    return max(own, busy)


def _step_s(cost: CostModel, batch: float, mean_context: float) -> float:
    """A decode step of a fractional (time-averaged) batch: linear between whole batches."""
    low = max(1, math.floor(batch))
    weight = batch - low
    low_s = cost.decode_step_s(low, round(low * mean_context))
    if weight <= 0.0:
        return low_s
    high_s = cost.decode_step_s(low + 1, round((low + 1) * mean_context))
    return low_s + weight * (high_s - low_s)


def _prefill_per_token_s(cost: CostModel) -> float:
    """Prefill seconds per token (cost models are linear in tokens past a small batch)."""
    sample = 8192
    return cost.prefill_s(sample) / sample


def plan_makespan_s(
    tp_degrees: Sequence[int],
    groups: Sequence[Sequence[int]],
    lengths: Sequence[float],
    prompts: Sequence[int],
    cost_for_tp: Callable[[int], CostModel],
    shape: AgentShape,
) -> float:
    """The estimated makespan of a plan: the slowest worker's ``worker_makespan_s`` over the
    trajectory indices of its group."""
    if len(tp_degrees) != len(groups):
        raise ValueError(f"{len(tp_degrees)} workers but {len(groups)} groups")
    return max(
        (
            worker_makespan_s(
                [lengths[i] for i in group], [prompts[i] for i in group], cost_for_tp(tp), shape
            )
            for tp, group in zip(tp_degrees, groups, strict=True)
        ),
        default=0.0,
    )
