"""Tail re-sharding (ours, beyond the paper): whether merging workers of one node into one
worker of a higher TP degree finishes their trajectories sooner, its switch included.

Why it can pay: a decode step's fixed costs (weights read once per step, the TP overhead) are
split over the batch, so a few long trajectories left on low-TP workers decode far slower per
token than they would alone on a high degree (Qwen3-32B on H200, one sequence: 17.6 / 11.3 / 8.8
/ 8.2 ms per token at TP 1 / 2 / 4 / 8, ``heddle.policy.cost.model``), while the bulk of a
rollout prefers low degrees for throughput. Merging pays only once the batches are small: four
TP2 workers of 20 sequences each step as fast as one TP8 worker of 80.

The estimate (``estimate_reshard``): each member's trajectories drain on their own worker
(``drain_s``: one batch that shrinks as each trajectory's remaining output runs out, every
trajectory then waiting its remaining tool seconds), against all of them draining together on
the merged worker after the switch (``switch_cost``): the engines stopped and the merged one
started (``restart_s``: process start, NCCL set-up, CUDA graph capture), its weights loaded
(``heddle.policy.cost.model.weight_load_s``: the model's bytes at a stated rate per GPU) and
every context re-prefilled there at its prefill rate, in one batch. The KV is re-prefilled,
never moved: each rank of a TP group holds its own slice of the heads, so a cache moves
between degrees only through a re-layout that neither real engine has (SGLang exports no KV at
all). Both sides ignore tool gaps in the batch, the same error on each side.

``merge_groups`` lists the candidate merges of one node. ``may_pay`` is a cheap necessary
condition (bounds, one step time per worker), checked before the estimate: most of a rollout is
far from its tail, and the estimate costs a step time per trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel

RESHARD_MARGIN = 1.0
"""A re-shard is taken when its predicted saving exceeds the switch's own cost by this
fraction of that cost (1.0: the predicted time with the switch, its cost included, must be
shorter by at least the cost again). The saving rests on predicted remaining lengths, whose
log error is about 0.5 for a trajectory's remaining output (``SimConfig.predictor_sigma``;
the online model is worse), so a saving twice too large is a common error; and a switch cannot
be taken back: a margin of the cost's size keeps one whose saving was predicted twice too
large from costing more than it saves."""
RESHARD_MIN_SHARE = 0.1
"""... and by this share of the members' predicted remaining time: the prediction of a long
horizon errs by tens of percent, so a saving of a few percent of it is noise, however large
in seconds (a 46-s saving on a 5,000-s horizon of coding agents, measured: the merge cost 4%;
docs/benchmarks.md, "Tail re-sharding")."""
MAX_DRAIN_PHASES = 16
"""``drain_s`` prices at most this many batch sizes: exact for the few stragglers a re-shard is
about, and a step time per phase rather than per trajectory while a rollout is far from its
tail (the decider weighs every node several times a restart's time)."""


@dataclass(frozen=True, slots=True)
class Straggler:
    """A trajectory as the estimate sees it."""

    remaining_tokens: float
    """Predicted output still to come."""
    context_tokens: int
    """Its context now (what a move re-prefills)."""
    remaining_tool_s: float = 0.0
    """Predicted tool seconds still to come."""


@dataclass(frozen=True, slots=True)
class Member:
    """A worker of the candidate merge: its TP degree's cost model and its trajectories."""

    worker_id: str
    cost: CostModel
    stragglers: tuple[Straggler, ...]


@dataclass(frozen=True, slots=True)
class SwitchCost:
    restart_s: float
    """Engines stopped and the merged one started, weights aside."""
    weight_load_s: float
    """The merged engine loading its weights."""
    reprefill_s: float
    """The merged engine prefilling every moved context."""

    @property
    def total_s(self) -> float:
        return self.restart_s + self.weight_load_s + self.reprefill_s


@dataclass(frozen=True, slots=True)
class ReshardEstimate:
    current_s: float
    """Seconds until the members' trajectories are done where they are."""
    resharded_s: float
    """Seconds until they are done on the merged worker, the switch included."""
    switch: SwitchCost

    @property
    def saving_s(self) -> float:
        return self.current_s - self.resharded_s

    def pays(self, margin: float = RESHARD_MARGIN, min_share: float = RESHARD_MIN_SHARE) -> bool:
        """Whether the saving exceeds ``margin`` times the switch's cost (``RESHARD_MARGIN``)
        and ``min_share`` of the time it saves on (``RESHARD_MIN_SHARE``)."""
        saving_s = self.saving_s
        return saving_s > margin * self.switch.total_s and saving_s > min_share * self.current_s


def drain_s(cost: CostModel, stragglers: Sequence[Straggler]) -> float:
    """Seconds until the last of ``stragglers`` is done when they decode together on one worker
    of ``cost``: they step together until the shortest runs out, then the rest, and so on (each
    phase at the batch's step time, contexts at their mid-phase size); a trajectory is done
    after its remaining tool seconds too. A trajectory in a tool call is not in the batch, so
    each counts in it by the share of its remaining time it decodes (``_duty``). 0 for none.
    Past ``MAX_DRAIN_PHASES`` trajectories, they leave in that many groups of equal count, each
    when its longest runs out (a little long, alike for every worker compared)."""
    order = sorted(stragglers, key=lambda s: s.remaining_tokens)
    duty = [_duty(cost, s) for s in order]
    size = max(1, -(-len(order) // MAX_DRAIN_PHASES))
    weight = sum(duty)
    contexts = sum(d * s.context_tokens for d, s in zip(duty, order, strict=True))
    elapsed_s, decoded, last_s = 0.0, 0.0, 0.0
    for start in range(0, len(order), size):
        phase = order[start : start + size]
        tokens = max(0.0, phase[-1].remaining_tokens) - decoded
        if tokens > 0:
            context = contexts + weight * (decoded + tokens / 2)
            elapsed_s += tokens * _step_s(cost, weight, round(context))
            decoded += tokens
        last_s = max(last_s, elapsed_s + max(0.0, max(s.remaining_tool_s for s in phase)))
        leaving = duty[start : start + size]
        weight -= sum(leaving)
        contexts -= sum(d * s.context_tokens for d, s in zip(leaving, phase, strict=True))
    return last_s


def _step_s(cost: CostModel, weight: float, context_tokens: int) -> float:
    """A decode step of a batch of ``weight`` sequences (between the whole sizes around it;
    at least one)."""
    low = max(1, math.floor(weight))
    low_s = cost.decode_step_s(low, context_tokens)
    if weight <= low:
        return low_s
    high_s = cost.decode_step_s(low + 1, context_tokens)
    return low_s + (weight - low) * (high_s - low_s)


def _duty(cost: CostModel, straggler: Straggler) -> float:
    """The share of its remaining time a trajectory decodes (its tool seconds the rest), at
    its solo step time: 1 without tool time."""
    tool_s = max(0.0, straggler.remaining_tool_s)
    decode_s = max(0.0, straggler.remaining_tokens) * cost.decode_step_s(
        1, straggler.context_tokens
    )
    return decode_s / (decode_s + tool_s) if decode_s + tool_s > 0 else 1.0


def drain_bound_s(cost: CostModel, stragglers: Sequence[Straggler]) -> float:
    """At least ``drain_s``: the longest remaining output with every trajectory in the batch
    throughout at its final context, then the longest tool time (0 for none)."""
    if not stragglers:
        return 0.0
    longest = max(max(0.0, s.remaining_tokens) for s in stragglers)
    batch = len(stragglers)
    context = sum(s.context_tokens for s in stragglers) + round(batch * longest)
    tools = max(s.remaining_tool_s for s in stragglers)
    return longest * cost.decode_step_s(batch, context) + max(0.0, tools)


def merged_floor_s(merged: CostModel, stragglers: Sequence[Straggler]) -> float:
    """At most ``drain_s`` on the merged worker: its longest remaining output alone."""
    if not stragglers:
        return 0.0
    longest = max(max(0.0, s.remaining_tokens) for s in stragglers)
    return longest * merged.decode_step_s(1, min(s.context_tokens for s in stragglers))


def may_pay(
    members: Sequence[Member],
    merged: CostModel,
    *,
    restart_s: float,
    weight_load_s: float,
    margin: float = RESHARD_MARGIN,
) -> bool:
    """False where ``estimate_reshard(...).pays(margin)`` cannot hold: even the members' slowest
    bound against the merged floor saves too little for a switch of at least its restart and
    weight load (True does not mean it pays)."""
    current_s = max((drain_bound_s(m.cost, m.stragglers) for m in members), default=0.0)
    everyone = [s for m in members for s in m.stragglers]
    fixed_s = restart_s + weight_load_s
    return current_s - merged_floor_s(merged, everyone) - fixed_s > margin * fixed_s


def switch_cost(
    merged: CostModel, stragglers: Sequence[Straggler], *, restart_s: float, weight_load_s: float
) -> SwitchCost:
    """What moving ``stragglers`` onto a freshly started merged worker costs before it decodes."""
    reprefill_s = merged.prefill_s(sum(s.context_tokens for s in stragglers))
    return SwitchCost(restart_s, weight_load_s, reprefill_s)


def estimate_reshard(
    members: Sequence[Member], merged: CostModel, *, restart_s: float, weight_load_s: float
) -> ReshardEstimate:
    """The members' trajectories where they are, against all of them on the merged worker."""
    current_s = max((drain_s(m.cost, m.stragglers) for m in members), default=0.0)
    everyone = [s for m in members for s in m.stragglers]
    switch = switch_cost(merged, everyone, restart_s=restart_s, weight_load_s=weight_load_s)
    return ReshardEstimate(current_s, switch.total_s + drain_s(merged, everyone), switch)


def merge_groups(
    workers: Sequence[tuple[str, int]], degrees: Sequence[int]
) -> list[tuple[list[str], int]]:
    """Candidate merges of one node's workers, given as ``(worker id, TP degree)`` with the
    one whose trajectories finish last first: for each degree of ``degrees`` above the first
    worker's, the first worker and then the next ones in order whose degrees add up to it
    exactly (one that would overshoot is skipped); a merge needs two workers at least. Only
    merges that take in the first worker can shorten the node's finish, and taking the next
    most urgent ones first spreads its stragglers over the fewest new GPUs' worth of others."""
    if not workers:
        return []
    groups: list[tuple[list[str], int]] = []
    first_id, first_tp = workers[0]
    for degree in sorted(degrees):
        if degree <= first_tp:
            continue
        members, total = [first_id], first_tp
        for worker_id, tp in workers[1:]:
            if total + tp <= degree:
                members.append(worker_id)
                total += tp
            if total == degree:
                break
        if total == degree and len(members) > 1:
            groups.append((members, degree))
    return groups
