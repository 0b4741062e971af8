"""A makespan lower bound for any workload, GPU budget and policy (docs/calibration.md s.4):

    LB = max( max_j solo_j ,  decode work / GPU budget )

Every benchmark reports makespan / LB. The bound holds for any placement, priority, migration
or TP configuration, provided the cost models are *monotone*: a decode step never gets cheaper
with more sequences or more context, and prefill never gets cheaper with more tokens (true of
``AnalyticCostModel``; true of a ``ProfiledCostModel`` whose ITL rises per sequence at least as
fast as its KV reads of ``context_tokens`` cost). Derivation, per trajectory ``j`` with prompt
``P``, steps ``s`` of ``o_s`` output tokens, tool time ``t_s`` and observation ``u_s`` tokens,
and context ``c_s = P + sum_{s' < s} (o_s' + u_s')`` at the start of step ``s``:

* **Solo.** Whatever else runs, step ``s`` needs its new tokens prefilled and ``d_s = o_s - 1``
  decode steps (the first token may come from prefill) at contexts ``c_s .. c_s + d_s - 1``,
  each no faster than alone at batch 1; its tool call runs after it (not after the last step).
  Steps may run on different TP degrees (migration), so each step takes the cheapest degree
  that fits the budget. With the cost model's linear floor ``decode_step_s(1, C) >= f + k C``
  the decode sum is closed-form: ``d f + k (d c + d (d - 1) / 2)``.
* **Work.** A decode step of ``b`` sequences with total context ``C`` on a TP-``p`` worker
  occupies ``p`` GPUs for ``decode_step_s(b, C) >= f_p(b) + k_p C``. Summed over all steps of
  all workers, with ``b <= b_max(p)`` (KV capacity over the smallest prompt), this is at least
  ``N * min_{p,b} p f_p(b) / b  +  min_p (p k_p) * W`` GPU-seconds, where ``N = sum d_s`` is the
  decode-token count and ``W = sum_s (d_s c_s + d_s (d_s - 1) / 2)`` the context those tokens
  read; independently, at least ``N * min_{p,b} p decode_step_s(b, b P_min) / b``. Prefill
  needs at least ``min_p p prefill_s_p(total new tokens)`` GPU-seconds (prefill cost is
  subadditive: linear in the shipped models). The budget supplies ``num_gpus`` GPU-seconds per
  second.

Two options say what the engine may save, both conservative by default:

* ``shared_prompts=True``: prompts may come from a prefix cache shared within a group, so prompt
  prefill counts nowhere; observations (tool output) always count.
* ``overlapped_prefill=True``: an engine may fold prefill into decode iterations (chunked
  prefill), so the work term is ``max(decode, prefill)``; with ``False`` (engines whose prefill
  stalls decoding, like the simulator's batching model and SGLang's default) it is the sum.

* ``kv_aware=True`` adds a third work term, ``heddle.policy.kv_work``: a decode step's fixed
  cost is shared by a batch no larger than the KV holds, so each token pays its share in
  proportion to its context: ``sum over decode tokens of min_p p (beta_p + (F_p / cap_p + k_p) c)``
  GPU-seconds (proved there). ``False`` gives the bound as it was before that term (reported
  beside the new one).

Cost models without ``decode_floor_terms`` get the weaker per-step bound ``d_s *
decode_step_s(1, c_s)`` and only the second work term. Batch sizes are enumerated exactly up
to ``MAX_ENUMERATED_BATCH``; beyond it the per-token minimum is taken as 0 (still a bound).

For the simulator (``heddle.sim.run.lower_bound_s``) the tight options are valid: its engines
keep one prefix per trajectory (no prompt shared across a group) and stall decoding while they
prefill.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, cast

from heddle.policy.cost.model import CostModel
from heddle.policy.kv_work import (
    MAX_ENUMERATED_BATCH,
    DecodeFloor,
    Envelope,
    kv_decode_gpu_s,
    token_cost_lines,
)

__all__ = ["MAX_ENUMERATED_BATCH", "DecodeFloor", "LowerBound", "makespan_lower_bound"]


class StepShape(Protocol):
    @property
    def output_tokens(self) -> int: ...
    @property
    def tool_s(self) -> float: ...
    @property
    def tool_output_tokens(self) -> int: ...


class TrajectoryShape(Protocol):
    """What the bound reads of a trajectory (``heddle.traces.TraceTrajectory`` fits)."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def steps(self) -> Sequence[StepShape]: ...


@dataclass(frozen=True, slots=True)
class LowerBound:
    makespan_s: float
    """``max(solo_s, work_s)``."""
    solo_s: float
    """The slowest trajectory alone on the fastest configuration, tools included."""
    work_s: float
    """GPU-seconds of the whole workload (decode, and prefill as the options say) over the
    GPU budget."""
    critical_index: int
    """The trajectory whose solo time is ``solo_s``."""
    kv_work_s: float = 0.0
    """The KV-aware work term alone (``kv_aware``; 0 without it): decode GPU-seconds by
    ``heddle.policy.kv_work``, plus prefill as the options say, over the GPU budget."""


@dataclass(frozen=True, slots=True)
class _StepFacts:
    decode_tokens: int
    context_tokens: int
    context_sum: float
    """Sum of the contexts the decode tokens read: ``d c + d (d - 1) / 2``."""
    prefill_tokens: int


def makespan_lower_bound(
    trajectories: Sequence[TrajectoryShape],
    num_gpus: int,
    cost_models: Mapping[int, CostModel],
    *,
    shared_prompts: bool = True,
    overlapped_prefill: bool = True,
    kv_aware: bool = True,
) -> LowerBound:
    """The bound of the module docstring. ``cost_models`` maps each TP degree the system may use
    to its cost model; degrees above ``num_gpus`` are ignored. ``ValueError`` for an empty
    workload, ``num_gpus < 1``, negative counts, or no usable degree."""
    if not trajectories:
        raise ValueError("no trajectories: the lower bound needs a workload")
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    usable = {tp: m for tp, m in cost_models.items() if tp <= num_gpus and m.max_kv_tokens > 0}
    if not usable:
        raise ValueError(f"no TP degree among {sorted(cost_models)} fits {num_gpus} GPUs")
    facts = [
        _step_facts(trajectory, index, shared_prompts)
        for index, trajectory in enumerate(trajectories)
    ]
    solo = _SoloPricer(usable)
    solo_times = [
        sum(solo.step_s(step) for step in steps) + _tool_s(trajectory)
        for steps, trajectory in zip(facts, trajectories, strict=True)
    ]
    critical = max(range(len(solo_times)), key=solo_times.__getitem__)
    min_prompt = min(trajectory.prompt_tokens for trajectory in trajectories)
    prefill_gpu_s = _prefill_gpu_s(facts, usable)

    def work(decode_gpu_s: float) -> float:
        if overlapped_prefill:
            return max(decode_gpu_s, prefill_gpu_s) / num_gpus
        return (decode_gpu_s + prefill_gpu_s) / num_gpus

    work_s = work(_decode_gpu_s(facts, usable, min_prompt))
    kv_work_s = 0.0
    lines = token_cost_lines(usable, min_prompt) if kv_aware else []
    if lines:
        ranges = ((s.context_tokens, s.decode_tokens) for steps in facts for s in steps)
        kv_work_s = work(kv_decode_gpu_s(ranges, Envelope(lines)))
    work_s = max(work_s, kv_work_s)
    solo_s = solo_times[critical]
    return LowerBound(max(solo_s, work_s), solo_s, work_s, critical, kv_work_s)


def _step_facts(trajectory: TrajectoryShape, index: int, shared_prompts: bool) -> list[_StepFacts]:
    if trajectory.prompt_tokens < 0:
        raise ValueError(f"trajectory {index}: prompt_tokens must be >= 0")
    facts: list[_StepFacts] = []
    context = trajectory.prompt_tokens
    new_tokens = 0 if shared_prompts else trajectory.prompt_tokens
    for number, step in enumerate(trajectory.steps):
        if step.output_tokens < 0 or step.tool_output_tokens < 0 or not step.tool_s >= 0.0:
            raise ValueError(f"trajectory {index} step {number}: counts and tool_s must be >= 0")
        decode = max(step.output_tokens - 1, 0)
        context_sum = decode * context + decode * (decode - 1) / 2
        facts.append(_StepFacts(decode, context, context_sum, new_tokens))
        context += step.output_tokens + step.tool_output_tokens
        new_tokens = step.tool_output_tokens
    return facts


def _prefill_gpu_s(
    facts: Sequence[Sequence[_StepFacts]], cost_models: Mapping[int, CostModel]
) -> float:
    num_tokens = sum(step.prefill_tokens for steps in facts for step in steps)
    return min(tp * model.prefill_s(num_tokens) for tp, model in cost_models.items())


def _tool_s(trajectory: TrajectoryShape) -> float:
    """Tool time of every step but the last (a trajectory ends with a generation)."""
    return math.fsum(step.tool_s for step in trajectory.steps[:-1])


class _SoloPricer:
    """The cheapest usable degree's time for one step alone (memoised prefill)."""

    def __init__(self, cost_models: Mapping[int, CostModel]) -> None:
        self._models = list(cost_models.values())
        self._floors = [_floor_of(model, 1) for model in self._models]
        self._prefill = [lru_cache(maxsize=1 << 14)(model.prefill_s) for model in self._models]

    def step_s(self, step: _StepFacts) -> float:
        return min(
            _solo_decode_s(model, floor, step) + prefill(step.prefill_tokens)
            for model, floor, prefill in zip(self._models, self._floors, self._prefill, strict=True)
        )


def _floor_of(model: CostModel, batch_size: int) -> tuple[float, float] | None:
    return model.decode_floor_terms(batch_size) if isinstance(model, DecodeFloor) else None


def _solo_decode_s(model: CostModel, floor: tuple[float, float] | None, step: _StepFacts) -> float:
    """Two valid floors, the larger wins: every step costs at least the first one alone, and
    the linear floor sums the context growth exactly."""
    if step.decode_tokens == 0:
        return 0.0
    first_step_s = step.decode_tokens * model.decode_step_s(1, step.context_tokens)
    if floor is None:
        return first_step_s
    fixed_s, per_context_token_s = floor
    return max(first_step_s, step.decode_tokens * fixed_s + per_context_token_s * step.context_sum)


def _decode_gpu_s(
    facts: Sequence[Sequence[_StepFacts]], cost_models: Mapping[int, CostModel], min_prompt: int
) -> float:
    num_tokens = sum(step.decode_tokens for steps in facts for step in steps)
    context_sum = math.fsum(step.context_sum for steps in facts for step in steps)
    per_token = min(_min_gpu_s_per_token(tp, m, min_prompt) for tp, m in cost_models.items())
    bound = num_tokens * per_token
    if all(isinstance(m, DecodeFloor) for m in cost_models.values()):
        fixed = min(_min_fixed_gpu_s_per_token(tp, m, min_prompt) for tp, m in cost_models.items())
        kv = min(
            tp * cast(DecodeFloor, m).decode_floor_terms(1)[1] for tp, m in cost_models.items()
        )
        if fixed > -math.inf:
            bound = max(bound, num_tokens * fixed + kv * context_sum)
    return bound


def _batch_sizes(model: CostModel, min_prompt: int) -> range | None:
    """Every batch the KV capacity admits (sequences of at least ``min_prompt`` tokens), or None
    when that is more than ``MAX_ENUMERATED_BATCH`` (unbounded for empty prompts)."""
    if min_prompt <= 0:
        return None
    limit = max(1, model.max_kv_tokens // min_prompt)
    return range(1, limit + 1) if limit <= MAX_ENUMERATED_BATCH else None


def _min_gpu_s_per_token(tp: int, model: CostModel, min_prompt: int) -> float:
    sizes = _batch_sizes(model, min_prompt)
    if sizes is None:
        return 0.0
    return min(tp * model.decode_step_s(b, b * min_prompt) / b for b in sizes)


def _min_fixed_gpu_s_per_token(tp: int, model: CostModel, min_prompt: int) -> float:
    """``min_b p f_p(b) / b``; may be negative for a profile (the sum stays a valid bound),
    ``-inf`` when the batch sizes are too many to enumerate."""
    sizes = _batch_sizes(model, min_prompt)
    if sizes is None:
        return -math.inf
    floor = cast(DecodeFloor, model)
    return min(tp * floor.decode_floor_terms(b)[0] / b for b in sizes)
