"""A makespan lower bound for any workload, GPU budget and policy (docs/calibration.md s.4):

    LB = max( max_j solo_j ,  decode work / GPU budget )

Every benchmark reports makespan / LB. The bound holds for any placement, priority, migration
or TP configuration, provided the cost models are *monotone*: a decode step never gets cheaper
with more sequences or more context, and prefill never gets cheaper with more tokens (true of
``AnalyticCostModel``; true of a ``ProfiledCostModel`` whose ITL rises per sequence at least as
fast as its KV reads of ``context_tokens`` cost). Derivation, per trajectory ``j`` with prompt
``P``, steps ``s`` of ``o_s`` output tokens, tool time ``t_s`` and observation ``u_s`` tokens,
and context ``c_s = P + sum_{s' < s} (o_s' + u_s')`` at the start of step ``s`` (the facts:
``heddle.policy.bound_facts``, which also says what each prompt-sharing mode saves):

* **Solo.** Whatever else runs, step ``s`` needs its new tokens prefilled (the prompt, unless
  a sibling's cache may hold it, then each observation) and ``d_s = o_s - 1`` decode steps (the
  first token may come from prefill) at contexts ``c_s .. c_s + d_s - 1``, each no faster than
  alone at batch 1; its tool call runs after it (not after the last step). Steps may run on
  different TP degrees (migration), so each step takes the cheapest degree that fits the
  budget. With the cost model's linear floor ``decode_step_s(1, C) >= f + k C`` the decode sum
  is closed-form: ``d f + k (d c + d (d - 1) / 2)``.
* **Work.** A decode step of ``b`` sequences with total context ``C`` on a TP-``p`` worker
  occupies ``p`` GPUs for ``decode_step_s(b, C) >= f_p(b) + k_p C``. ``C`` counts every
  sequence's whole context, a shared prompt once per sequence (attention reads it for each),
  while the KV holds a shared prompt once: so the batch is bounded by the KV each sequence holds
  at least, ``b <= b_max(p) = cap_p / R_min`` with ``R_min = min_j (P_j - s_j)`` (``s_j`` the
  prompt tokens others may hold for it). Summed over all steps of all workers this is at least
  ``N * min_{p,b} p f_p(b) / b  +  min_p (p k_p) * W`` GPU-seconds, where ``N = sum d_s`` is the
  decode-token count and ``W = sum_s (d_s c_s + d_s (d_s - 1) / 2)`` the context those tokens
  read; independently, at least ``N * min_{p,b} p decode_step_s(b, b P_min) / b`` (every
  context holds at least the shortest prompt). Prefill needs at least ``min_p p sum_s
  prefill_s_p(n_s, c_s - n_s)`` GPU-seconds over every step's ``n_s`` new tokens the workload
  must prefill once (a shared prompt once per group, attending to nothing before it; an
  observation attending to the context before it): a prefill batch costs the sum of its
  sequences', and a sequence re-prefilled after losing its cache only prefills more, each token
  attending to no less. The budget supplies ``num_gpus`` GPU-seconds per second.

Options:

* ``prompt_sharing`` (``heddle.policy.bound_facts.PromptSharing``): ``any`` (the default, valid
  for any engine) counts no prompt prefill and lets a prompt take no KV of its own; ``group``
  (SGLang's radix cache) prefills a group's prompt once and holds it once per worker; ``none``
  (one prefix per trajectory) prefills and holds every copy.
* ``overlapped_prefill=True``: an engine may fold prefill into decode iterations (chunked
  prefill), so the work term is ``max(decode, prefill)``; with ``False`` (engines whose prefill
  stalls decoding, like the simulator's batching model and SGLang's default) it is the sum.
* ``kv_aware=True`` adds a third work term, ``heddle.policy.kv_work``: a decode step's fixed
  cost is shared by a batch no larger than the KV holds, so each token pays its share in
  proportion to the KV it holds: ``sum over decode tokens of min_p p (beta_p + F_p (c - s) /
  cap_p + k_p c)`` GPU-seconds (proved there). ``False`` gives the bound without that term.
* ``max_batch``: the most sequences a worker decodes at once (the engines' running cap), a
  further limit on ``b``.

Cost models without ``decode_floor_terms`` get the weaker per-step bound ``d_s *
decode_step_s(1, c_s)`` and only the second work term. Batch sizes are enumerated exactly up
to ``MAX_ENUMERATED_BATCH``; beyond it the per-token minimum is taken as 0 (still a bound).

For the simulator (``heddle.sim.on_workers.lower_bound_s``) the engine model's own sharing is valid
(``group`` for ``sglang``, ``none`` for ``torch``), and its engines stall decoding while they
prefill.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from heddle.policy.bound_facts import (
    PromptSharing,
    StepFacts,
    TrajectoryBoundFacts,
    TrajectoryShape,
    workload_facts,
)
from heddle.policy.cost.model import CostModel, PrefillTerms, attended_pairs
from heddle.policy.kv_work import (
    MAX_ENUMERATED_BATCH,
    DecodeFloor,
    kv_decode_gpu_s,
    max_batch_size,
    token_cost_lines,
)

__all__ = ["MAX_ENUMERATED_BATCH", "DecodeFloor", "LowerBound", "makespan_lower_bound"]


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


def makespan_lower_bound(
    trajectories: Sequence[TrajectoryShape],
    num_gpus: int,
    cost_models: Mapping[int, CostModel],
    *,
    prompt_sharing: PromptSharing = "any",
    overlapped_prefill: bool = True,
    kv_aware: bool = True,
    max_batch: int | None = None,
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
    facts = workload_facts(trajectories, prompt_sharing)
    solo = _SoloPricer(usable)
    solo_times = [sum(solo.step_s(step) for step in f.steps) + f.tool_s for f in facts]
    critical = max(range(len(solo_times)), key=solo_times.__getitem__)
    limits = _BatchLimits.of(facts, max_batch)
    prefill_gpu_s = _prefill_gpu_s(facts, usable)

    def work(decode_gpu_s: float) -> float:
        if overlapped_prefill:
            return max(decode_gpu_s, prefill_gpu_s) / num_gpus
        return (decode_gpu_s + prefill_gpu_s) / num_gpus

    work_s = work(_decode_gpu_s(facts, usable, limits))
    kv_work_s = 0.0
    lines = (
        token_cost_lines(usable, limits.min_resident_tokens, limits.max_batch) if kv_aware else []
    )
    if lines:
        ranges = (
            (s.context_tokens, s.decode_tokens, f.shared_prompt_tokens)
            for f in facts
            for s in f.steps
        )
        kv_work_s = work(kv_decode_gpu_s(ranges, lines))
    work_s = max(work_s, kv_work_s)
    solo_s = solo_times[critical]
    return LowerBound(max(solo_s, work_s), solo_s, work_s, critical, kv_work_s)


@dataclass(frozen=True, slots=True)
class _BatchLimits:
    """What bounds a decode batch: the least KV a running sequence holds, the shortest context
    it reads, and the engines' running cap."""

    min_resident_tokens: float
    min_prompt_tokens: int
    max_batch: int | None

    @classmethod
    def of(cls, facts: Sequence[TrajectoryBoundFacts], max_batch: int | None) -> _BatchLimits:
        """A batch holds one generation per trajectory, so never more than the workload has."""
        limit = len(facts) if max_batch is None else min(max_batch, len(facts))
        return cls(
            min(f.min_resident_tokens for f in facts), min(f.prompt_tokens for f in facts), limit
        )

    def sizes(self, model: CostModel) -> range | None:
        """Every batch the KV capacity and the cap admit, or None when that is more than
        ``MAX_ENUMERATED_BATCH``."""
        limit = max_batch_size(model.max_kv_tokens, self.min_resident_tokens, self.max_batch)
        return None if limit is None else range(1, limit + 1)


def _prefill_gpu_s(
    facts: Sequence[TrajectoryBoundFacts], cost_models: Mapping[int, CostModel]
) -> float:
    steps = [step for f in facts for step in f.steps if step.prefill_tokens]
    num_tokens = sum(step.prefill_tokens for step in steps)
    num_pairs = math.fsum(attended_pairs(s.prefill_tokens, s.cached_tokens) for s in steps)

    def gpu_s(tp: int, model: CostModel) -> float:
        if isinstance(model, PrefillTerms):
            per_token_s, per_pair_s = model.prefill_terms()
            return tp * (per_token_s * num_tokens + per_pair_s * num_pairs)
        return tp * math.fsum(model.prefill_s(s.prefill_tokens, s.cached_tokens) for s in steps)

    return min(gpu_s(tp, model) for tp, model in cost_models.items())


class _SoloPricer:
    """The cheapest usable degree's time for one step alone."""

    def __init__(self, cost_models: Mapping[int, CostModel]) -> None:
        self._models = list(cost_models.values())
        self._floors = [_floor_of(model, 1) for model in self._models]

    def step_s(self, step: StepFacts) -> float:
        new, cached = step.solo_prefill_tokens, step.cached_tokens
        return min(
            _solo_decode_s(model, floor, step) + model.prefill_s(new, cached)
            for model, floor in zip(self._models, self._floors, strict=True)
        )


def _floor_of(model: CostModel, batch_size: int) -> tuple[float, float] | None:
    return model.decode_floor_terms(batch_size) if isinstance(model, DecodeFloor) else None


def _solo_decode_s(model: CostModel, floor: tuple[float, float] | None, step: StepFacts) -> float:
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
    facts: Sequence[TrajectoryBoundFacts],
    cost_models: Mapping[int, CostModel],
    limits: _BatchLimits,
) -> float:
    num_tokens = sum(step.decode_tokens for f in facts for step in f.steps)
    context_sum = math.fsum(step.context_sum for f in facts for step in f.steps)
    per_token = min(_min_gpu_s_per_token(tp, m, limits) for tp, m in cost_models.items())
    bound = num_tokens * per_token
    if all(isinstance(m, DecodeFloor) for m in cost_models.values()):
        fixed = min(_min_fixed_gpu_s_per_token(tp, m, limits) for tp, m in cost_models.items())
        kv = min(
            tp * cast(DecodeFloor, m).decode_floor_terms(1)[1] for tp, m in cost_models.items()
        )
        if fixed > -math.inf:
            bound = max(bound, num_tokens * fixed + kv * context_sum)
    return bound


def _min_gpu_s_per_token(tp: int, model: CostModel, limits: _BatchLimits) -> float:
    sizes = limits.sizes(model)
    if sizes is None:
        return 0.0
    shortest = limits.min_prompt_tokens
    return min(tp * model.decode_step_s(b, b * shortest) / b for b in sizes)


def _min_fixed_gpu_s_per_token(tp: int, model: CostModel, limits: _BatchLimits) -> float:
    """``min_b p f_p(b) / b``; may be negative for a profile (the sum stays a valid bound),
    ``-inf`` when the batch sizes are too many to enumerate."""
    sizes = limits.sizes(model)
    if sizes is None:
        return -math.inf
    floor = cast(DecodeFloor, model)
    return min(tp * floor.decode_floor_terms(b)[0] / b for b in sizes)
