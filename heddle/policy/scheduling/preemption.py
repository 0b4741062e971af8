"""Which running requests yield their batch slot to which waiting ones (docs/paper.md, the paper's
s.4, PPS).

One decision per scheduling step, for one worker. Waiting requests are considered in priority
order; each first takes free capacity. When it does not fit, it may evict running requests with
the lowest priorities, but only those it beats by a margin (hysteresis: a prediction that wobbles
by a few tokens must not bounce two trajectories in and out of the batch every step). The
preempted keep their prefix cache (the engine's business); they go back to the waiting queue.

Capacity is in whatever unit the caller uses (batch slots: size 1 each; or KV tokens: the
request's context length), the same for ``free_capacity`` and every ``size``.

This module is the one statement of the rule and of the order for every engine: the simulator's
batching model (``heddle.policy.batching``), the torch engine's scheduler and the SGLang
engine's admission queue all rank requests with ``request_order``, pick victims with
the reverse of that order and preempt only when ``PreemptionConfig.beats`` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

OrderKey = tuple[float, float, str]


def request_order(priority: float, arrival: float, request_id: str) -> OrderKey:
    """Sort key of the serving order, best first: priority descending, then earlier arrival,
    then the smaller id (vLLM's ``(priority, arrival, id)``, with larger priorities first).
    Preemption victims are taken in the exact reverse order: the lowest priority first; among
    equals the latest arrival, which has the least sunk."""
    return (-priority, arrival, request_id)


@dataclass(frozen=True, slots=True)
class RankedRequest:
    request_id: str
    priority: float
    """Larger runs first (``heddle.policy.scheduling.priority``)."""
    size: float = 1.0
    """Capacity it occupies (a slot, or its KV tokens)."""
    arrival_s: float = 0.0
    """Tie-break between equal priorities: earlier first."""


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    min_priority_gap: float = 0.0
    """A waiting request must exceed a running one's priority by more than this to evict it."""
    min_relative_gap: float = 0.05
    """... and by more than this fraction of the running one's |priority| (PPS: 5% of tokens)."""

    def beats(self, waiting: float, running: float) -> bool:
        return waiting > running + max(self.min_priority_gap, self.min_relative_gap * abs(running))


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_id: str
    """The running request that goes back to the waiting queue."""
    replacement_id: str
    """The waiting request that takes its place."""


@dataclass(frozen=True, slots=True)
class SchedulingDecision:
    admitted: list[str] = field(default_factory=list)
    """Waiting requests to start now, in priority order."""
    preemptions: list[Preemption] = field(default_factory=list)


def _waiting_order(request: RankedRequest) -> OrderKey:
    return request_order(request.priority, request.arrival_s, request.request_id)


def decide_preemptions(
    running: Sequence[RankedRequest],
    waiting: Sequence[RankedRequest],
    free_capacity: float,
    config: PreemptionConfig = PreemptionConfig(),
    *,
    allow_preemption: bool = True,
) -> SchedulingDecision:
    """Admit waiting requests into free capacity, then (if allowed) evict beaten running ones.

    Strict priority order: a waiting request that can neither fit nor evict enough blocks all
    lower ones (no overtaking, so a large request is not starved by small ones). ``ValueError``
    for a negative capacity or size, or an id both running and waiting.
    """
    _check(running, waiting, free_capacity)
    victims = sorted(running, key=_waiting_order, reverse=True)  # victims first
    decision = SchedulingDecision()
    free = free_capacity
    for request in sorted(waiting, key=_waiting_order):
        if request.size <= free:
            free -= request.size
            decision.admitted.append(request.request_id)
            continue
        if not allow_preemption:
            break
        evicted = _evict_for(request, victims, free, config)
        if evicted is None:
            break
        free += sum(victim.size for victim in evicted) - request.size
        del victims[: len(evicted)]
        decision.admitted.append(request.request_id)
        decision.preemptions.extend(Preemption(v.request_id, request.request_id) for v in evicted)
    return decision


def _evict_for(
    request: RankedRequest,
    victims: Sequence[RankedRequest],
    free: float,
    config: PreemptionConfig,
) -> list[RankedRequest] | None:
    """The fewest lowest-priority running requests, each beaten by ``request``, whose capacity
    (with what is free) fits it; None if no such set exists."""
    evicted: list[RankedRequest] = []
    for victim in victims:
        if free >= request.size:
            break
        if not config.beats(request.priority, victim.priority):
            return None
        evicted.append(victim)
        free += victim.size
    return evicted if free >= request.size else None


def _check(
    running: Sequence[RankedRequest], waiting: Sequence[RankedRequest], free_capacity: float
) -> None:
    if not free_capacity >= 0.0:
        raise ValueError(f"free_capacity must be >= 0, got {free_capacity!r}")
    for request in (*running, *waiting):
        if not request.size >= 0.0:
            raise ValueError(f"request {request.request_id!r} has a bad size {request.size!r}")
    overlap = {r.request_id for r in running} & {w.request_id for w in waiting}
    if overlap:
        raise ValueError(f"requests both running and waiting: {sorted(overlap)}")
