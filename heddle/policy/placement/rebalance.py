"""Re-balancing moves: a trajectory in its tool gap moves when that shortens the slower of its
two workers' estimated finishes.

The presorted partition (``heddle.policy.placement.presorted``) and the rank-based migration planner
(``heddle.policy.migration.planner``) place by *predicted* lengths. Where the first predictions know
little (a math agent's reasoning length is not in its prompt), the partition's groups are
uneven for no reason and a long trajectory predicted short sits in a crowded batch; rank moves
do not fix that, since the ranks are as wrong as the predictions. A re-balancing move looks at
the batches instead: a worker's estimated finish is its longest predicted remaining output
times its per-token step time at its batch size (``CostModel.decode_step_s``; every context
counted at the mover's size), after the pause of a weight swap the worker must take first
(``WorkerQueue.pause_s``), and a move from ``source`` to ``target`` is taken when the larger of
the two finishes after it (the mover paying its re-prefill at the target when the KV does not
move) is below ``1 - margin`` of the larger before it. Among the workers where it
does, the one with the largest relative gain wins (ties: the first given). Each move can only
lower that pairwise finish, so moves do not cycle; ``margin`` keeps a move worth its churn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel

DEFAULT_REBALANCE_MARGIN = 0.1
"""The relative gain below which a move is not worth its disruption (assumption)."""


@dataclass(frozen=True, slots=True)
class WorkerQueue:
    """One worker as the re-balancer sees it: its batch and its longest predicted remaining
    output (tokens)."""

    worker_id: str
    cost: CostModel
    batch: int
    longest_remaining: float
    pause_s: float = 0.0
    """Seconds before its next decode step: the load of a weight version it must swap to first
    (0 when none)."""


def finish_s(
    cost: CostModel, batch: int, longest_remaining: float, context_tokens: int, pause_s: float = 0.0
) -> float:
    """Estimated seconds until a worker's longest trajectory is done at this batch size, after
    ``pause_s`` (0 for an empty worker)."""
    if batch <= 0:
        return 0.0
    return pause_s + max(0.0, longest_remaining) * cost.decode_step_s(batch, batch * context_tokens)


def rebalance_target(
    mover_remaining: float,
    source: WorkerQueue,
    others: Sequence[WorkerQueue],
    *,
    context_tokens: int,
    kv_transfer: bool,
    margin: float = DEFAULT_REBALANCE_MARGIN,
) -> str | None:
    """The worker the mover (on ``source``, counted in its batch) should go to, or None where
    no move gains more than ``margin``. ``kv_transfer``: the move costs the mover no re-prefill
    (its KV moves, or it must re-prefill wherever it runs: stale after a weight swap).
    ``ValueError`` for an empty source or ``margin`` outside [0, 1)."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if source.batch < 1:
        raise ValueError("the source holds no trajectory: the mover must be counted on it")
    context = max(1, context_tokens)
    mover_before = finish_s(source.cost, source.batch, mover_remaining, context, source.pause_s)
    best, best_gain = None, -math.inf
    for target in others:
        before = max(
            mover_before,
            finish_s(target.cost, target.batch, target.longest_remaining, context, target.pause_s),
        )
        batch = target.batch + 1
        step_s = target.cost.decode_step_s(batch, batch * context)
        mover_s = target.pause_s + max(0.0, mover_remaining) * step_s
        if not kv_transfer:
            mover_s += target.cost.prefill_s(context)
        residents_s = 0.0
        if target.batch:
            residents_s = target.pause_s + max(0.0, target.longest_remaining) * step_s
        after = max(residents_s, mover_s)
        if before <= 0 or after >= before * (1.0 - margin):
            continue
        gain = 1.0 - after / before
        if gain > best_gain:
            best, best_gain = target.worker_id, gain
    return best
